/* The snapshot boundary of the LMDB log (lmdb_log.h): compaction of a
 * prefix, the reset after an installed snapshot, and reading the boundary.
 * Invariant: first_index == snapshot_index + 1 (format.h). */

#include <stdint.h>

#include "format.h"
#include "txn.h"

/* Deletes every entry with index <= @index. */
static void delete_to(struct txn *t, raft_index index)
{
    MDB_cursor *cur;
    MDB_val key;
    MDB_val val;
    raft_index at = 0;
    int rc;

    cur = txn_entries_cursor(t);
    if (cur == NULL) {
        return;
    }
    while (t->rc == 0) {
        rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST);
        if (rc == MDB_NOTFOUND) {
            break;
        }
        txn_check(t, rc, "mdb_cursor_get");
        txn_key_get(t, &key, &at);
        if (t->rc != 0 || at > index) {
            break;
        }
        txn_check(t, mdb_cursor_del(cur, 0), "mdb_cursor_del");
    }
    mdb_cursor_close(cur);
}

/* Records the snapshot boundary (@index, @term) and the first index after
 * it. Invariant: first_index == snapshot_index + 1 (format.h). */
static void put_boundary(struct txn *t, raft_index index, raft_term term)
{
    txn_meta_put(t, LMDB_LOG_FORMAT_META_FIRST_INDEX, index + 1);
    txn_meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, index);
    txn_meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, term);
}

/* Deletes the prefix through *arg and moves the boundary there, reading
 * the boundary's term from its entry before deleting it (thesis §5.1: the
 * snapshot keeps the last included index and term). */
static void compact_body(struct txn *t, void *arg)
{
    raft_index index = *(const raft_index *)arg;
    uint8_t buf[LMDB_LOG_FORMAT_KEY_LEN];
    MDB_val key = {sizeof buf, buf};
    MDB_val val;
    uint64_t snapshot = 0;
    raft_index first = 0;
    raft_index last = 0;
    const char *defect;
    raft_term term;
    int rc;

    txn_meta_get(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, &snapshot);
    txn_bounds(t, &first, &last);
    if (t->rc != 0 || index <= snapshot) {
        return;
    }
    if (index > last) {
        txn_fail(t, RAFT_INVALID,
                 "index %llu is past the last stored index %llu",
                 (unsigned long long)index, (unsigned long long)last);
        return;
    }
    format_key_encode(index, buf);
    rc = mdb_get(t->txn, t->log->entries, &key, &val);
    if (rc == MDB_NOTFOUND) {
        txn_fail(t, RAFT_CORRUPT, "index %llu is missing from [%llu, %llu]",
                 (unsigned long long)index, (unsigned long long)first,
                 (unsigned long long)last);
        return;
    }
    txn_check(t, rc, "mdb_get");
    if (t->rc != 0) {
        return;
    }
    defect = format_entry_check(index, val.mv_data, val.mv_size);
    if (defect != NULL) {
        txn_fail(t, RAFT_CORRUPT, "index %llu: %s", (unsigned long long)index,
                 defect);
        return;
    }
    term = format_entry_term(val.mv_data);
    delete_to(t, index);
    put_boundary(t, index, term);
}

int lmdb_log_compact(struct lmdb_log *l, raft_index index)
{
    return txn_run_write(l, "compact", compact_body, &index);
}

int lmdb_log_snapshot(struct lmdb_log *l, raft_index *out_index,
                      raft_term *out_term)
{
    return txn_read_meta(l, "snapshot", LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX,
                         out_index, LMDB_LOG_FORMAT_META_SNAPSHOT_TERM,
                         out_term);
}

/* The boundary of a reset. */
struct reset_args {
    raft_index index; /* snapshot index */
    raft_term term;   /* snapshot term */
};

/* Deletes every entry and sets the boundary (paper Fig. 13, receiver rule
 * 7: discard the entire log). */
static void reset_body(struct txn *t, void *arg)
{
    const struct reset_args *a = arg;

    txn_delete_from(t, 0);
    put_boundary(t, a->index, a->term);
}

int lmdb_log_reset(struct lmdb_log *l, raft_index snapshot_index,
                   raft_term snapshot_term)
{
    struct reset_args args = {snapshot_index, snapshot_term};

    if (snapshot_index == UINT64_MAX ||
        (snapshot_index == 0) != (snapshot_term == 0)) {
        txn_set_errmsg(l,
                       "reset: snapshot index %llu with term %llu: both must "
                       "be 0, or both non-zero and the index below 2^64 - 1",
                       (unsigned long long)snapshot_index,
                       (unsigned long long)snapshot_term);
        return RAFT_INVALID;
    }
    return txn_run_write(l, "reset", reset_body, &args);
}
