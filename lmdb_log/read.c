/* Reads of the LMDB log (lmdb_log.h): the hard state, the bounds and
 * ranges of entries, each in one short read transaction that copies what
 * it returns out of the map. Any thread.
 *
 * Failure modes: a value whose checksum or shape is wrong gives
 * RAFT_CORRUPT with its index in the message; it is never returned as an
 * entry. A range below the first index gives RAFT_COMPACTED. */

#include <limits.h>
#include <stdlib.h>

#include "format.h"
#include "txn.h"

int lmdb_log_hard_state(struct lmdb_log *l, struct raft_hard_state *out)
{
    return txn_read_meta(l, "hard_state", LMDB_LOG_FORMAT_META_TERM, &out->term,
                         LMDB_LOG_FORMAT_META_VOTE, &out->vote);
}

int lmdb_log_bounds(struct lmdb_log *l, raft_index *out_first,
                    raft_index *out_last)
{
    struct txn t;
    raft_index first = 0;
    raft_index last = 0;

    txn_read_begin(&t, l, "bounds");
    txn_bounds(&t, &first, &last);
    if (txn_read_end(&t) != 0) {
        return t.rc;
    }
    *out_first = first;
    *out_last = last;
    return 0;
}

int lmdb_log_usage(struct lmdb_log *l, uint64_t *out_used, uint64_t *out_budget)
{
    struct txn t;
    MDB_stat st;

    txn_read_begin(&t, l, "usage");
    if (t.rc == 0) {
        txn_check(&t, mdb_stat(t.txn, l->entries, &st), "mdb_stat");
    }
    if (txn_read_end(&t) != 0) {
        return t.rc;
    }
    *out_used = ((uint64_t)st.ms_branch_pages + st.ms_leaf_pages +
                 st.ms_overflow_pages) *
                st.ms_psize;
    *out_budget = l->entries_budget;
    return 0;
}

void lmdb_log_entries_free(struct raft_entry *entries, unsigned n)
{
    if (entries == NULL) {
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        raft_buf_unref(entries[i].data);
    }
    free(entries);
}

/* Appends one more slot to the array *@a (*@n used, *@cap allocated). */
static int reserve_slot(struct raft_entry **a, unsigned *n, unsigned *cap,
                        uint64_t wanted)
{
    struct raft_entry *grown;
    unsigned next;

    if (*n < *cap) {
        return 0;
    }
    if (*cap == UINT_MAX) {
        return RAFT_NOMEM;
    }
    next = *cap == 0 ? 16 : (*cap > UINT_MAX / 2 ? UINT_MAX : *cap * 2);
    if (next > wanted) {
        next = (unsigned)wanted;
    }
    grown = realloc(*a, (size_t)next * sizeof **a);
    if (grown == NULL) {
        return RAFT_NOMEM;
    }
    *a = grown;
    *cap = next;
    return 0;
}

int lmdb_log_entries(struct lmdb_log *l, raft_index lo, raft_index hi,
                     uint64_t max_bytes, struct raft_entry **out,
                     unsigned *out_n)
{
    struct txn t;
    struct raft_entry *a = NULL;
    unsigned n = 0;
    unsigned cap = 0;
    uint64_t total = 0;
    uint8_t buf[LMDB_LOG_FORMAT_KEY_LEN];
    MDB_cursor *cur = NULL;
    MDB_val key;
    MDB_val val;
    raft_index first = 0;
    raft_index last = 0;
    raft_index index = 0;
    const char *defect;
    MDB_cursor_op op = MDB_SET_KEY;
    int rc;

    if (lo > hi) {
        *out = NULL;
        *out_n = 0;
        return 0;
    }
    txn_read_begin(&t, l, "entries");
    txn_bounds(&t, &first, &last);
    if (t.rc == 0 && lo >= 1 && lo < first) {
        txn_fail(&t, RAFT_COMPACTED,
                 "[%llu, %llu] is not stored: entries up to %llu were "
                 "compacted into a snapshot",
                 (unsigned long long)lo, (unsigned long long)hi,
                 (unsigned long long)(first - 1));
    }
    if (t.rc == 0 && (lo < first || hi > last)) {
        txn_fail(&t, RAFT_NOTFOUND,
                 "[%llu, %llu] is not stored: the log holds [%llu, %llu]",
                 (unsigned long long)lo, (unsigned long long)hi,
                 (unsigned long long)first, (unsigned long long)last);
    }
    if (t.rc == 0) {
        rc = mdb_cursor_open(t.txn, l->entries, &cur);
        txn_check(&t, rc, "mdb_cursor_open");
    }
    format_key_encode(lo, buf);
    key.mv_size = sizeof buf;
    key.mv_data = buf;
    for (raft_index want = lo; t.rc == 0; want++) {
        rc = mdb_cursor_get(cur, &key, &val, op);
        op = MDB_NEXT;
        if (rc == MDB_NOTFOUND) {
            txn_fail(&t, RAFT_NOTFOUND, "index %llu is not stored",
                     (unsigned long long)want);
            break;
        }
        txn_check(&t, rc, "mdb_cursor_get");
        txn_key_get(&t, &key, &index);
        if (t.rc == 0 && index != want) {
            txn_fail(&t, RAFT_NOTFOUND, "index %llu is not stored",
                     (unsigned long long)want);
        }
        if (t.rc != 0) {
            break;
        }
        defect = format_entry_check(index, val.mv_data, val.mv_size);
        if (defect != NULL) {
            txn_fail(&t, RAFT_CORRUPT, "index %llu: %s",
                     (unsigned long long)index, defect);
            break;
        }
        if (n > 0 && max_bytes > 0 &&
            total + (val.mv_size - LMDB_LOG_FORMAT_ENTRY_EXTRA) > max_bytes) {
            break;
        }
        if (reserve_slot(&a, &n, &cap, hi - lo + 1) != 0 ||
            format_entry_decode(index, val.mv_data, val.mv_size, &a[n])) {
            txn_fail(&t, RAFT_NOMEM, "out of memory at index %llu",
                     (unsigned long long)index);
            break;
        }
        total += val.mv_size - LMDB_LOG_FORMAT_ENTRY_EXTRA;
        n++;
        if (index == hi) {
            break;
        }
    }
    if (cur != NULL) {
        mdb_cursor_close(cur);
    }
    if (txn_read_end(&t) != 0) {
        lmdb_log_entries_free(a, n);
        return t.rc;
    }
    *out = a;
    *out_n = n;
    return 0;
}
