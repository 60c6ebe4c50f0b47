/* The cluster id kept in the log's meta database (lmdb_log.h,
 * lmdb_log_cluster_id; records of format.h), two u64 halves read and
 * written together. */

#include <stdbool.h>
#include <string.h>

#include "format.h"
#include "txn.h"

/* load_half and store_half move half @k (0 or 1) of a cluster id between
 * its bytes and the u64 of its record, little-endian. */
static uint64_t load_half(const uint8_t *id, unsigned k)
{
    uint64_t v = 0;

    for (unsigned i = 8; i-- > 0;) {
        v = (v << 8) | id[8 * k + i];
    }
    return v;
}

static void store_half(uint8_t *id, unsigned k, uint64_t v)
{
    for (unsigned i = 0; i < 8; i++) {
        id[8 * k + i] = (uint8_t)(v >> (8 * i));
    }
}

int lmdb_log_cluster_id(struct lmdb_log *l,
                        uint8_t out[LMDB_LOG_CLUSTER_ID_LEN])
{
    uint64_t half[2] = {0, 0};
    bool found[2] = {false, false};
    struct txn t;

    txn_read_begin(&t, l, "cluster_id");
    txn_meta_find(&t, LMDB_LOG_FORMAT_META_CLUSTER_ID_0, &half[0], &found[0]);
    txn_meta_find(&t, LMDB_LOG_FORMAT_META_CLUSTER_ID_1, &half[1], &found[1]);
    if (t.rc == 0 && found[0] != found[1]) {
        txn_fail(&t, RAFT_CORRUPT, "meta record \"%s\" is missing",
                 found[0] ? LMDB_LOG_FORMAT_META_CLUSTER_ID_1
                          : LMDB_LOG_FORMAT_META_CLUSTER_ID_0);
    }
    if (txn_read_end(&t) != 0) {
        return t.rc;
    }
    store_half(out, 0, half[0]);
    store_half(out, 1, half[1]);
    return 0;
}

static void set_body(struct txn *t, void *arg)
{
    const uint8_t *id = arg;

    txn_meta_put(t, LMDB_LOG_FORMAT_META_CLUSTER_ID_0, load_half(id, 0));
    txn_meta_put(t, LMDB_LOG_FORMAT_META_CLUSTER_ID_1, load_half(id, 1));
}

int lmdb_log_set_cluster_id(struct lmdb_log *l,
                            const uint8_t id[LMDB_LOG_CLUSTER_ID_LEN])
{
    uint8_t copy[LMDB_LOG_CLUSTER_ID_LEN];

    memcpy(copy, id, sizeof copy);
    return txn_run_write(l, "set_cluster_id", set_body, copy);
}
