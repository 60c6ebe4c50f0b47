/* Writes at the end of the LMDB log (lmdb_log.h): appends with the hard
 * state, and suffix truncation, each one durable write transaction.
 *
 * Failure modes: a full log must still take a new term or vote (or the
 * node could never vote again) and be truncated, and both need a few free
 * pages (copy-on-write, freelist records). So entries may not fill the
 * whole map: an append whose entries would take more than entries_budget
 * (the ceiling less a reserve) fails with RAFT_NOSPACE before commit, and
 * the reserve stays for hard state updates and deletions. */

#include "format.h"
#include "txn.h"

/* Fails @t with RAFT_NOSPACE when the entries now take more pages than
 * entries_budget allows (see the file comment: the rest is a reserve for
 * hard state updates and deletions). */
static void check_budget(struct txn *t)
{
    MDB_stat st;
    uint64_t used;

    if (t->rc != 0) {
        return;
    }
    txn_check(t, mdb_stat(t->txn, t->log->entries, &st), "mdb_stat");
    if (t->rc != 0) {
        return;
    }
    used = ((uint64_t)st.ms_branch_pages + st.ms_leaf_pages +
            st.ms_overflow_pages) *
           st.ms_psize;
    if (used > t->log->entries_budget) {
        txn_fail(t, RAFT_NOSPACE,
                 "log full: entries would take %llu bytes, over the %llu "
                 "that the ceiling of %llu bytes set by log_max_mb leaves "
                 "them; compact or truncate the log or raise log_max_mb",
                 (unsigned long long)used,
                 (unsigned long long)t->log->entries_budget,
                 (unsigned long long)t->log->max_bytes);
    }
}

/* The request of one append. */
struct append_args {
    const struct raft_hard_state *hs; /* hard state to store, or NULL */
    const struct raft_entry *entries; /* entries to store, n long */
    unsigned n;                       /* number of entries */
};

/* Stores the hard state, deletes the conflicting suffix and appends.
 * Invariant: after it, the stored indexes are consecutive and end with
 * entries[n - 1].index (paper Fig. 2, AppendEntries receiver rules 3-4). */
static void append_body(struct txn *t, void *arg)
{
    const struct append_args *a = arg;
    uint8_t buf[LMDB_LOG_FORMAT_KEY_LEN];
    MDB_cursor *cur;
    MDB_val key;
    MDB_val val;
    raft_index first = 0;
    raft_index last = 0;
    raft_index start;
    size_t payload_len;
    int rc;

    if (a->hs != NULL) {
        txn_meta_put(t, LMDB_LOG_FORMAT_META_TERM, a->hs->term);
        txn_meta_put(t, LMDB_LOG_FORMAT_META_VOTE, a->hs->vote);
    }
    if (a->n == 0) {
        return;
    }
    start = a->entries[0].index;
    txn_bounds(t, &first, &last);
    if (t->rc == 0 && (start < first || start > last + 1)) {
        txn_fail(t, RAFT_INVALID,
                 "entries start at index %llu but the log holds [%llu, "
                 "%llu]: a gap after the log or below its first index",
                 (unsigned long long)start, (unsigned long long)first,
                 (unsigned long long)last);
    }
    if (t->rc == 0 && start <= last) {
        txn_delete_from(t, start);
    }
    cur = txn_entries_cursor(t);
    if (cur == NULL) {
        return;
    }
    for (unsigned i = 0; i < a->n && t->rc == 0; i++) {
        const struct raft_entry *e = &a->entries[i];
        payload_len = e->data != NULL ? e->data->len : 0;
        format_key_encode(e->index, buf);
        key.mv_size = sizeof buf;
        key.mv_data = buf;
        val.mv_size = format_entry_len(payload_len);
        val.mv_data = NULL;
        rc = mdb_cursor_put(cur, &key, &val, MDB_APPEND | MDB_RESERVE);
        txn_check(t, rc, "mdb_cursor_put");
        if (rc == 0) {
            format_entry_encode(e, val.mv_data);
        }
    }
    mdb_cursor_close(cur);
    check_budget(t);
}

int lmdb_log_append(struct lmdb_log *l, const struct raft_hard_state *hs,
                    const struct raft_entry *entries, unsigned n)
{
    struct append_args args = {hs, entries, n};
    size_t payload_len;

    if (n > 0 && entries == NULL) {
        txn_set_errmsg(l, "append: %u entries but no array", n);
        return RAFT_INVALID;
    }
    for (unsigned i = 0; i < n; i++) {
        if (entries[i].index == 0 || entries[i].index != entries[0].index + i) {
            txn_set_errmsg(l,
                           "append: entries[%u] has index %llu, expected "
                           "%llu: indexes must be consecutive and >= 1",
                           i, (unsigned long long)entries[i].index,
                           (unsigned long long)(entries[0].index + i));
            return RAFT_INVALID;
        }
        payload_len = entries[i].data != NULL ? entries[i].data->len : 0;
        if (payload_len > LMDB_LOG_FORMAT_MAX_PAYLOAD) {
            txn_set_errmsg(l,
                           "append: index %llu: payload of %zu bytes "
                           "exceeds the format's limit",
                           (unsigned long long)entries[i].index, payload_len);
            return RAFT_INVALID;
        }
    }
    if (hs == NULL && n == 0) {
        return 0;
    }
    return txn_run_write(l, "append", append_body, &args);
}

/* Deletes every entry with index >= *arg, never one at or below the
 * snapshot boundary. */
static void truncate_body(struct txn *t, void *arg)
{
    raft_index index = *(const raft_index *)arg;
    uint64_t snapshot = 0;

    txn_meta_get(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, &snapshot);
    if (t->rc == 0 && index <= snapshot) {
        txn_fail(t, RAFT_INVALID,
                 "index %llu is at or below the snapshot boundary %llu",
                 (unsigned long long)index, (unsigned long long)snapshot);
    }
    txn_delete_from(t, index);
}

int lmdb_log_truncate_suffix(struct lmdb_log *l, raft_index index)
{
    return txn_run_write(l, "truncate_suffix", truncate_body, &index);
}
