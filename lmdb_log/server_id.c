/* The id of the server a log belongs to, kept in the log's meta database
 * (lmdb_log.h, lmdb_log_server_id; the "server_id" record of
 * format.h). */

#include <lmdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "format.h"
#include "txn.h"

int lmdb_log_server_id(struct lmdb_log *l, uint64_t *out)
{
    uint64_t id = 0;
    bool found = false;
    struct txn t;

    txn_read_begin(&t, l, "server_id");
    txn_meta_find(&t, LMDB_LOG_FORMAT_META_SERVER_ID, &id, &found);
    if (txn_read_end(&t) != 0) {
        return t.rc;
    }
    *out = found ? id : 0;
    return 0;
}

static void set_body(struct txn *t, void *arg)
{
    txn_meta_put(t, LMDB_LOG_FORMAT_META_SERVER_ID, *(const uint64_t *)arg);
}

int lmdb_log_set_server_id(struct lmdb_log *l, uint64_t id)
{
    return txn_run_write(l, "set_server_id", set_body, &id);
}

int lmdb_log_peek_server_id(const char *dir, uint64_t *out, char *errmsg,
                            size_t errmsg_len)
{
    char path[4200];
    struct stat st;
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi meta;
    MDB_val key = {strlen(LMDB_LOG_FORMAT_META_SERVER_ID),
                   (void *)LMDB_LOG_FORMAT_META_SERVER_ID};
    MDB_val val;
    const char *what = "mdb_env_create";
    int rc;

    *out = 0;
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if (stat(path, &st) != 0) {
        return 0; /* no log yet */
    }
    rc = mdb_env_create(&env);
    if (rc == 0) {
        what = "mdb_env_set_maxdbs";
        rc = mdb_env_set_maxdbs(env, LMDB_LOG__DBS);
    }
    if (rc == 0) {
        what = "mdb_env_open";
        rc = mdb_env_open(env, dir, MDB_RDONLY | MDB_NOTLS, 0600);
    }
    if (rc == 0) {
        what = "mdb_txn_begin";
        rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    }
    if (rc == 0) {
        what = "mdb_dbi_open";
        rc = mdb_dbi_open(txn, "meta", 0, &meta);
    }
    if (rc == 0) {
        what = "mdb_get";
        rc = mdb_get(txn, meta, &key, &val);
    }
    if (rc == 0 && format_meta_decode(LMDB_LOG_FORMAT_META_SERVER_ID,
                                      val.mv_data, val.mv_size, out) != 0) {
        snprintf(errmsg, errmsg_len, "%s: meta record \"%s\" is corrupt", dir,
                 LMDB_LOG_FORMAT_META_SERVER_ID);
        rc = RAFT_CORRUPT;
    } else if (rc == MDB_NOTFOUND) {
        rc = 0; /* no meta database, or no record: no owner yet */
    } else if (rc != 0) {
        snprintf(errmsg, errmsg_len, "%s: %s: %s", dir, what, mdb_strerror(rc));
        rc = RAFT_IOERR;
    }
    if (txn != NULL) {
        mdb_txn_abort(txn);
    }
    if (env != NULL) {
        mdb_env_close(env);
    }
    return rc;
}
