/* The inflight window of one follower (see inflights.h). */

#include "inflights.h"

#include <assert.h>
#include <stdlib.h>

int inflights_init(struct raft_inflights *f, unsigned cap, uint64_t max_bytes)
{
    struct raft_inflight *ring;

    if (cap == 0) {
        cap = 1;
    }
    ring = malloc(cap * sizeof *ring);
    if (ring == NULL) {
        return RAFT_NOMEM;
    }
    f->ring = ring;
    f->cap = cap;
    f->max_bytes = max_bytes;
    inflights_reset(f);
    return 0;
}

void inflights_close(struct raft_inflights *f)
{
    free(f->ring);
    f->ring = NULL;
    f->n = 0;
}

void inflights_reset(struct raft_inflights *f)
{
    f->start = 0;
    f->n = 0;
    f->bytes = 0;
}

bool inflights_full(const struct raft_inflights *f)
{
    if (f->n >= f->cap) {
        return true;
    }
    return f->n > 0 && f->max_bytes != 0 && f->bytes >= f->max_bytes;
}

uint64_t inflights_room(const struct raft_inflights *f)
{
    if (inflights_full(f)) {
        return 0;
    }
    if (f->max_bytes == 0 || f->n == 0) {
        return f->max_bytes == 0 ? UINT64_MAX : f->max_bytes;
    }
    return f->max_bytes - f->bytes;
}

const struct raft_inflight *inflights_at(const struct raft_inflights *f,
                                         unsigned i)
{
    return &f->ring[(f->start + i) % f->cap];
}

const struct raft_inflight *inflights_oldest(const struct raft_inflights *f)
{
    return f->n > 0 ? inflights_at(f, 0) : NULL;
}

void inflights_add(struct raft_inflights *f, uint64_t seq, raft_index last,
                   uint64_t bytes)
{
    struct raft_inflight *slot;

    /* Invariant: room was checked; seq and last increase. */
    assert(f->n < f->cap);
    assert(f->n == 0 || (inflights_at(f, f->n - 1)->seq < seq &&
                         inflights_at(f, f->n - 1)->last < last));
    slot = &f->ring[(f->start + f->n) % f->cap];
    slot->seq = seq;
    slot->last = last;
    slot->bytes = bytes;
    f->n++;
    f->bytes += bytes;
}

uint64_t inflights_free_le(struct raft_inflights *f, raft_index index)
{
    uint64_t seq = 0;

    while (f->n > 0 && f->ring[f->start].last <= index) {
        seq = f->ring[f->start].seq;
        f->bytes -= f->ring[f->start].bytes;
        f->start = (f->start + 1) % f->cap;
        f->n--;
    }
    return seq;
}
