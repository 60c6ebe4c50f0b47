/* The cluster id stored in the state machine (sql.h, "The cluster id"):
 * the payload of its entry, storing it when applied (the first one
 * wins), and reading it back. */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3ext.h>

#include "fsm_internal.h"
#include "sql.h"

SQLITE_EXTENSION_INIT3

#define SQL__CLUSTER_MAGIC0 0x43 /* 'C' */
#define SQL__CLUSTER_MAGIC1 0x49 /* 'I' */
#define SQL__CLUSTER_VERSION 1

void sql_cluster_entry_encode(const uint8_t id[SQL_CLUSTER_ID_LEN],
                              uint8_t out[SQL_CLUSTER_ENTRY_LEN])
{
    out[0] = SQL__CLUSTER_MAGIC0;
    out[1] = SQL__CLUSTER_MAGIC1;
    out[2] = SQL__CLUSTER_VERSION;
    memcpy(out + 3, id, SQL_CLUSTER_ID_LEN);
}

int sql_cluster_entry_is(const void *p, size_t len)
{
    const uint8_t *b = p;

    return len >= 2 && b[0] == SQL__CLUSTER_MAGIC0 &&
           b[1] == SQL__CLUSTER_MAGIC1;
}

/* is_zero says whether the @len bytes at @b are all zero. */
static int is_zero(const uint8_t *b, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (b[i] != 0) {
            return 0;
        }
    }
    return 1;
}

int cluster_id_store(struct sql_fsm *f, const struct sql_fsm_entry *e)
{
    sqlite3_stmt *s = f->stmts[STMT_CLUSTER];
    const uint8_t *p = e->data;
    char what[64];

    if (e->data == NULL || !sql_cluster_entry_is(e->data, e->len)) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg,
                    "entry %" PRIu64 ": not a cluster id entry", e->index);
        return SQL_ERR_CORRUPT;
    }
    if (e->len < 3 || p[2] != SQL__CLUSTER_VERSION) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg,
                    "entry %" PRIu64
                    ": a cluster id entry of version %d, want %d (written "
                    "by a newer raftsql?)",
                    e->index, e->len < 3 ? -1 : (int)p[2],
                    SQL__CLUSTER_VERSION);
        return SQL_ERR_FORMAT;
    }
    if (e->len != SQL_CLUSTER_ENTRY_LEN || is_zero(p + 3, SQL_CLUSTER_ID_LEN)) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg,
                    "entry %" PRIu64
                    ": a cluster id entry of %zu bytes (want %d), or of "
                    "id zero",
                    e->index, e->len, SQL_CLUSTER_ENTRY_LEN);
        return SQL_ERR_CORRUPT;
    }
    sqlite3_bind_blob(s, 1, p + 3, SQL_CLUSTER_ID_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)e->index);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)e->term);
    snprintf(what, sizeof what, "entry %" PRIu64 ": store the cluster id",
             e->index);
    return schema_run(f, STMT_CLUSTER, what);
}

int sql_fsm_cluster_id(struct sql_fsm *f, uint8_t out[SQL_CLUSTER_ID_LEN])
{
    sqlite3_stmt *s = f->stmts[STMT_CLUSTER_READ];
    uint8_t id[SQL_CLUSTER_ID_LEN] = {0};
    int rc = sqlite3_step(s);
    int malformed =
        rc == SQLITE_ROW && (sqlite3_column_type(s, 0) != SQLITE_BLOB ||
                             sqlite3_column_bytes(s, 0) != SQL_CLUSTER_ID_LEN);

    if (rc == SQLITE_ROW && !malformed) {
        memcpy(id, sqlite3_column_blob(s, 0), sizeof id);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        return fsm_fail(f, rc, "read raftsql_cluster");
    }
    if (malformed) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg,
                    "read raftsql_cluster: the row is malformed");
        return SQL_ERR_CORRUPT;
    }
    memcpy(out, id, sizeof id);
    return 0;
}
