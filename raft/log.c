/* The in-memory Raft log (see log.h). */

#include "log.h"

#include <assert.h>
#include <stdlib.h>

int log_init(struct raft_log *l, raft_index first,
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
    return e != NULL ? e->term : 0;
}

raft_term log_last_term(const struct raft_log *l)
{
    return l->n > 0 ? l->entries[l->n - 1].term : 0;
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
