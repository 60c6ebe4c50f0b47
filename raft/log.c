/* The in-memory Raft log (see log.h). */

#include "log.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int log_init(struct raft_log *l, raft_index first, raft_term snapshot_term,
             const struct raft_entry *entries, unsigned n)
{
    struct raft_entry *copy = NULL;
    unsigned i;

    if (first == 0 || (n > 0 && entries == NULL)) {
        return RAFT_INVALID;
    }
    for (i = 0; i < n; i++) {
        if (entries[i].index != first + i) {
            return RAFT_INVALID;
        }
    }
    if (n > 0) {
        copy = malloc(n * sizeof *copy);
        if (copy == NULL) {
            return RAFT_NOMEM;
        }
    }
    for (i = 0; i < n; i++) {
        copy[i] = entries[i];
        raft_buf_ref(copy[i].data);
    }
    l->entries = copy;
    l->n = n;
    l->cap = n;
    l->first = first;
    l->snapshot_term = first > 1 ? snapshot_term : 0;
    return 0;
}

void log_close(struct raft_log *l)
{
    log_truncate(l, l->first);
    free(l->entries);
    l->entries = NULL;
    l->cap = 0;
}

raft_index log_last_index(const struct raft_log *l)
{
    return l->first + l->n - 1;
}

raft_term log_term_at(const struct raft_log *l, raft_index index)
{
    const struct raft_entry *e = log_get(l, index);

    if (e != NULL) {
        return e->term;
    }
    return index != 0 && index == l->first - 1 ? l->snapshot_term : 0;
}

raft_term log_last_term(const struct raft_log *l)
{
    return l->n > 0 ? l->entries[l->n - 1].term : l->snapshot_term;
}

const struct raft_entry *log_get(const struct raft_log *l, raft_index index)
{
    if (index < l->first || index - l->first >= l->n) {
        return NULL;
    }
    return &l->entries[index - l->first];
}

int log_reserve(struct raft_log *l, size_t extra)
{
    struct raft_entry *grown;
    size_t cap;

    if (l->n + extra <= l->cap) {
        return 0;
    }
    cap = l->cap < 16 ? 16 : l->cap * 2;
    while (cap < l->n + extra) {
        cap *= 2;
    }
    grown = realloc(l->entries, cap * sizeof *grown);
    if (grown == NULL) {
        return RAFT_NOMEM;
    }
    l->entries = grown;
    l->cap = cap;
    return 0;
}

raft_index log_append(struct raft_log *l, raft_term term, uint8_t type,
                      struct raft_buf *data)
{
    struct raft_entry *e;

    /* Invariant: room was reserved by log_reserve. */
    assert(l->n < l->cap);
    e = &l->entries[l->n];
    e->term = term;
    e->index = l->first + l->n;
    e->type = type;
    e->data = raft_buf_ref(data);
    l->n++;
    return e->index;
}

void log_truncate(struct raft_log *l, raft_index from)
{
    if (from < l->first) {
        from = l->first;
    }
    while (l->n > 0 && log_last_index(l) >= from) {
        raft_buf_unref(l->entries[l->n - 1].data);
        l->n--;
    }
}

void log_compact(struct raft_log *l, raft_index index)
{
    size_t drop;
    size_t i;

    /* Invariant: first <= index <= last (checked by the caller). */
    assert(index >= l->first && index <= log_last_index(l));
    drop = (size_t)(index - l->first + 1);
    l->snapshot_term = l->entries[drop - 1].term;
    for (i = 0; i < drop; i++) {
        raft_buf_unref(l->entries[i].data);
    }
    memmove(l->entries, l->entries + drop, (l->n - drop) * sizeof *l->entries);
    l->n -= drop;
    l->first = index + 1;
    /* Bounded memory under steady load: give back a mostly empty array. */
    if (l->cap > 64 && l->n < l->cap / 4) {
        size_t cap = l->n * 2 < 16 ? 16 : l->n * 2;
        struct raft_entry *shrunk = realloc(l->entries, cap * sizeof *shrunk);
        if (shrunk != NULL) {
            l->entries = shrunk;
            l->cap = cap;
        }
    }
}

void log_reset(struct raft_log *l, raft_index index, raft_term term)
{
    log_truncate(l, l->first);
    free(l->entries);
    l->entries = NULL;
    l->cap = 0;
    l->first = index + 1;
    l->snapshot_term = term;
}
