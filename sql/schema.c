/* The internal raftsql_* tables of the state machine (applied index,
 * with the replica checksum's sums, dedup window, cluster-wide settings,
 * configuration, cluster id) and the internal statements that read and
 * write them on the apply connection. */

#include <stdio.h>
#include <string.h>

#include <sqlite3ext.h>

#include "fsm_internal.h"
#include "pragma.h"

SQLITE_EXTENSION_INIT3

/* The SQL of the internal statements, by STMT_* (fsm_internal.h). */
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
    /* ?3: the replica checksum's sums (checksum.h), NULL to keep them;
     * ?4: the latest request stamp applied, NULL to keep it; ?5: the
     * schema sum (checksum.h), NULL to keep it, and with it the index it
     * stands for: this batch's, as this release keeps it (one before the
     * schema sum leaves schema_sum_idx behind idx). */
    "UPDATE main.raftsql_applied SET idx = ?1, term = ?2,"
    " sums = coalesce(?3, sums), time_ms = coalesce(?4, time_ms),"
    " schema_sum = coalesce(?5, schema_sum),"
    " schema_sum_idx = CASE WHEN coalesce(?5, schema_sum) IS NULL"
    " THEN NULL ELSE ?1 END"
    " WHERE id = 0",
    "INSERT OR REPLACE INTO main.raftsql_settings(name, value) "
    "VALUES (?1, ?2)",
    "SELECT name, value FROM main.raftsql_settings",
    "INSERT OR REPLACE INTO main.raftsql_config(id, idx, term, data) "
    "VALUES (0, ?1, ?2, ?3)",
    /* The first cluster id applied wins (sql.h, "The cluster id"). */
    "INSERT OR IGNORE INTO main.raftsql_cluster(id, cluster_id, idx, term) "
    "VALUES (0, ?1, ?2, ?3)",
    "SELECT cluster_id FROM main.raftsql_cluster WHERE id = 0",
    /* client_id.c: the client request ids (see client_id_lookup). */
    "SELECT digest, ordinal, time_ms, rc, errmsg, changes,"
    " last_insert_rowid, rows FROM main.raftsql_client_requests"
    " WHERE id = ?1",
    "SELECT coalesce(max(ordinal), 0) + 1 FROM main.raftsql_client_requests",
    "INSERT OR REPLACE INTO main.raftsql_client_requests(id, digest,"
    " ordinal, time_ms, rc, errmsg, changes, last_insert_rowid, rows)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    "DELETE FROM main.raftsql_client_requests WHERE ordinal <= ?1",
    "DELETE FROM main.raftsql_client_requests WHERE time_ms < ?1",
    /* foreign.c: read at each batch and after each commit. */
    "PRAGMA main.data_version",
};

/* The client request ids (client_id.c): one row per id applied within
 * the window, with the digest of its request and its first outcome. A
 * rowid table (rows may be large), indexed for the two prunes. */
#define SQL__CLIENT_TABLE_SQL                                                  \
    "CREATE TABLE IF NOT EXISTS main.raftsql_client_requests("                 \
    " id BLOB PRIMARY KEY, digest BLOB NOT NULL, ordinal INTEGER NOT NULL,"    \
    " time_ms INTEGER NOT NULL, rc INTEGER NOT NULL, errmsg TEXT,"             \
    " changes INTEGER NOT NULL, last_insert_rowid INTEGER NOT NULL,"           \
    " rows TEXT);"                                                             \
    "CREATE INDEX IF NOT EXISTS main.raftsql_client_requests_ordinal"          \
    " ON raftsql_client_requests(ordinal);"                                    \
    "CREATE INDEX IF NOT EXISTS main.raftsql_client_requests_time"             \
    " ON raftsql_client_requests(time_ms);"

/* Internal tables. raftsql_applied has exactly one row (id 0);
 * raftsql_config has none until a configuration entry is applied, then
 * one (id 0); raftsql_cluster likewise for the cluster id.
 * raftsql_applied.sums holds the replica checksum's sums (checksum.h),
 * NULL while it is off; raftsql_applied.time_ms the latest leader stamp
 * ("now", ms since the epoch) of the requests applied, NULL before the
 * first (sql_fsm_applied_time); raftsql_applied.schema_sum the schema
 * sum (checksum.h), NULL while not known, and schema_sum_idx the applied
 * index it stands for (a release before the schema sum applies batches
 * without it: then it is behind idx, and the sum is not trusted); a database of before gets
 * these columns at open, and a snapshot of before at its install. */
static const char schema_sql[] =
    "BEGIN IMMEDIATE;"
    "CREATE TABLE IF NOT EXISTS main.raftsql_applied("
    " id INTEGER PRIMARY KEY CHECK (id = 0),"
    " idx INTEGER NOT NULL, term INTEGER NOT NULL, sums BLOB,"
    " time_ms INTEGER, schema_sum INTEGER, schema_sum_idx INTEGER);"
    "INSERT OR IGNORE INTO main.raftsql_applied(id, idx, term)"
    " VALUES (0, 0, 0);"
    "CREATE TABLE IF NOT EXISTS main.raftsql_requests("
    " origin INTEGER NOT NULL, seq INTEGER NOT NULL, idx INTEGER NOT NULL,"
    " PRIMARY KEY (origin, seq)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS main.raftsql_requests_idx"
    " ON raftsql_requests(idx);"
    "CREATE TABLE IF NOT EXISTS main.raftsql_settings("
    " name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS main.raftsql_config("
    " id INTEGER PRIMARY KEY CHECK (id = 0),"
    " idx INTEGER NOT NULL, term INTEGER NOT NULL, data BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS main.raftsql_cluster("
    " id INTEGER PRIMARY KEY CHECK (id = 0),"
    " cluster_id BLOB NOT NULL CHECK (length(cluster_id) = 16),"
    " idx INTEGER NOT NULL, term INTEGER NOT NULL);" SQL__CLIENT_TABLE_SQL
    "COMMIT;";

const char *schema_tables_sql(void)
{
    return schema_sql;
}

int schema_client_table(struct sql_fsm *f)
{
    int rc;

    f->internal = 1;
    rc = sqlite3_exec(f->db, SQL__CLIENT_TABLE_SQL, NULL, NULL, NULL);
    f->internal = 0;
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "create raftsql_client_requests");
    }
    return 0;
}

int schema_find_renamed(struct sql_fsm *f, char *out, size_t len)
{
    sqlite3_stmt *s = NULL;
    int rc;

    f->internal = 1;
    rc = sqlite3_prepare_v2(f->db,
                            "SELECT name FROM main.sqlite_schema"
                            " WHERE lower(substr(name, 1, 8)) = 'raftsql_' AND "
                            "name NOT IN " SCHEMA_INTERNAL_NAMES " LIMIT 1",
                            -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
    }
    f->internal = 0;
    if (rc == SQLITE_ROW) {
        snprintf(out, len, "%s", (const char *)sqlite3_column_text(s, 0));
        rc = 0;
    } else if (rc == SQLITE_DONE) {
        rc = 0;
    } else {
        rc = fsm_fail(f, rc, "read the schema");
    }
    sqlite3_finalize(s);
    return rc;
}

/* add_applied_column adds column @name of type @type to raftsql_applied
 * of @db when it lacks it (a database or snapshot of a version before
 * the column). Returns 0 or an error code with @errmsg (@errmsg_len
 * bytes) saying which. */
static int add_applied_column(sqlite3 *db, const char *name, const char *type,
                              char *errmsg, size_t errmsg_len)
{
    char sql[160];
    char *err = NULL;
    int rc;

    snprintf(sql, sizeof sql,
             "SELECT %s FROM main.raftsql_applied WHERE id = 0 LIMIT 0", name);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK) {
        return 0;
    }
    snprintf(sql, sizeof sql,
             "ALTER TABLE main.raftsql_applied ADD COLUMN %s %s", name, type);
    rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "add raftsql_applied.%s: %s", name,
                    err != NULL ? err : sqlite3_errstr(rc));
        sqlite3_free(err);
        return fsm_from_sqlite(rc);
    }
    return 0;
}

int schema_applied_columns(struct sql_fsm *f)
{
    int rc;

    f->internal = 1;
    rc = add_applied_column(f->db, "time_ms", "INTEGER", f->errmsg,
                            sizeof f->errmsg);
    if (rc == 0) {
        rc = add_applied_column(f->db, "schema_sum", "INTEGER", f->errmsg,
                                sizeof f->errmsg);
    }
    if (rc == 0) {
        rc = add_applied_column(f->db, "schema_sum_idx", "INTEGER", f->errmsg,
                                sizeof f->errmsg);
    }
    f->internal = 0;
    return rc;
}

int schema_create(struct sql_fsm *f, char *errmsg, size_t errmsg_len)
{
    sqlite3 *db = f->db;
    char *err = NULL;
    int rc, i;

    rc = sqlite3_exec(db, schema_sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "create raftsql tables: %s (%s)",
                    err != NULL ? err : sqlite3_errstr(rc), sqlite3_errstr(rc));
        sqlite3_free(err);
        if (!sqlite3_get_autocommit(db)) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        }
        return fsm_from_sqlite(rc);
    }
    /* A database of before the replica checksum, the stored stamp or
     * the schema sum: add their columns. */
    rc = add_applied_column(db, "sums", "BLOB", errmsg, errmsg_len);
    if (rc == 0) {
        rc = add_applied_column(db, "time_ms", "INTEGER", errmsg, errmsg_len);
    }
    if (rc == 0) {
        rc =
            add_applied_column(db, "schema_sum", "INTEGER", errmsg, errmsg_len);
    }
    if (rc == 0) {
        rc = add_applied_column(db, "schema_sum_idx", "INTEGER", errmsg,
                                errmsg_len);
    }
    if (rc != 0) {
        return rc;
    }
    for (i = 0; i < STMT__N; i++) {
        rc = sqlite3_prepare_v3(db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                &f->stmts[i], NULL);
        if (rc != SQLITE_OK) {
            sql_errmsgf(errmsg, errmsg_len, "prepare \"%s\": %s", stmt_sql[i],
                        sqlite3_errmsg(db));
            return fsm_from_sqlite(rc);
        }
    }
    return 0;
}

void schema_finalize(struct sql_fsm *f)
{
    int i;

    for (i = 0; i < STMT__N; i++) {
        sqlite3_finalize(f->stmts[i]);
    }
}

int schema_step(struct sql_fsm *f, int which)
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
        sql_errmsgf(f->errmsg, sizeof f->errmsg, "%s", msg);
        return rc;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return SQLITE_OK;
}

int schema_run(struct sql_fsm *f, int which, const char *what)
{
    int rc = schema_step(f, which);
    char msg[SQL__ERRMSG];

    if (rc == SQLITE_OK) {
        return 0;
    }
    memcpy(msg, f->errmsg, sizeof msg);
    sql_errmsgf(f->errmsg, sizeof f->errmsg, "%s: %s (%s)", what, msg,
                sqlite3_errstr(rc));
    return fsm_from_sqlite(rc);
}

int schema_load_settings(struct sql_fsm *f)
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
        rc = fsm_fail(f, rc, "read raftsql_settings");
        sqlite3_reset(s);
        return rc;
    }
    sqlite3_reset(s);
    for (i = 0; i < n && i < 16; i++) {
        rc = pragma_setting_apply(f->db, i, values[i]);
        if (rc != SQLITE_OK) {
            f->internal = 0;
            return fsm_fail(f, rc, pragma_setting_name(i));
        }
    }
    f->internal = 0;
    f->settings = 0;
    for (i = 0; i < n && i < 16; i++) {
        f->settings |= values[i] ? 1u << i : 0;
    }
    return 0;
}

int schema_read_applied(struct sql_fsm *f)
{
    sqlite3_stmt *s;
    int rc;

    /* Ours: the authorizer refuses this read to requests only. */
    f->internal = 1;
    rc = sqlite3_prepare_v2(f->db,
                            "SELECT idx, term, time_ms FROM "
                            "main.raftsql_applied WHERE id = 0",
                            -1, &s, NULL);
    if (rc != SQLITE_OK) {
        f->internal = 0;
        return fsm_fail(f, rc, "read raftsql_applied");
    }
    rc = sqlite3_step(s);
    f->internal = 0;
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE ? SQLITE_CORRUPT : rc;
        sqlite3_finalize(s);
        sql_errmsgf(f->errmsg, sizeof f->errmsg, "read raftsql_applied: %s",
                    rc == SQLITE_CORRUPT ? "the row is missing"
                                         : sqlite3_errmsg(f->db));
        return fsm_from_sqlite(rc);
    }
    pthread_mutex_lock(&f->tail_mu);
    f->applied = (uint64_t)sqlite3_column_int64(s, 0);
    f->recorded = f->applied;
    f->applied_term = (uint64_t)sqlite3_column_int64(s, 1);
    pthread_mutex_unlock(&f->tail_mu);
    f->has_applied_time = sqlite3_column_type(s, 2) != SQLITE_NULL;
    f->applied_time_ms =
        f->has_applied_time ? (int64_t)sqlite3_column_int64(s, 2) : 0;
    sqlite3_finalize(s);
    return 0;
}
