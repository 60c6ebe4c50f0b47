/* The id of the server a log belongs to, kept in the log's meta database
 * (lmdb_log.h, lmdb_log_server_id; the "server_id" record of
 * format.h). */

#include <stdbool.h>

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
