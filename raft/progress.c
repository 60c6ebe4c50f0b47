/* Per-follower replication progress, PROBE and REPLICATE (see progress.h;
 * etcd tracker/progress.go, thesis §3.5 and §10.2.1). */

#include "progress.h"

#include <stdlib.h>

int progress_init(struct raft_peer_progress *p, unsigned cap)
{
    raft_index *ring = malloc((cap > 0 ? cap : 1) * sizeof *ring);
    if (ring == NULL) {
        return RAFT_NOMEM;
    }
    p->inflights = ring;
    p->cap_inflight = cap > 0 ? cap : 1;
    progress_reset(p, 1, 0);
    return 0;
}

void progress_close(struct raft_peer_progress *p)
{
    free(p->inflights);
    p->inflights = NULL;
}

void progress_reset(struct raft_peer_progress *p, raft_index next,
                    uint64_t now)
{
    p->match = 0;
    p->next = next > 0 ? next : 1;
    p->state = RAFT_PROGRESS_PROBE;
    p->paused = false;
    p->last_progress = now;
    p->start_inflight = 0;
    p->n_inflight = 0;
}

void progress_become_probe(struct raft_peer_progress *p, uint64_t now)
{
    p->state = RAFT_PROGRESS_PROBE;
    p->next = p->match + 1;
    p->paused = false;
    p->last_progress = now;
    p->start_inflight = 0;
    p->n_inflight = 0;
}

void progress_become_replicate(struct raft_peer_progress *p, uint64_t now)
{
    p->state = RAFT_PROGRESS_REPLICATE;
    p->next = p->match + 1;
    p->paused = false;
    p->last_progress = now;
    p->start_inflight = 0;
    p->n_inflight = 0;
}

bool progress_maybe_update(struct raft_peer_progress *p, raft_index index,
                           uint64_t now)
{
    bool updated = false;

    if (index > p->match) {
        p->match = index;
        p->last_progress = now;
        updated = true;
    }
    if (p->next < p->match + 1) {
        p->next = p->match + 1;
    }
    return updated;
}

bool progress_maybe_decr(struct raft_peer_progress *p, raft_index reject,
                         raft_index hint, raft_index conflict, uint64_t now)
{
    raft_index next;

    if (p->state == RAFT_PROGRESS_REPLICATE) {
        /* A rejection at or below match answers an old message. */
        if (reject <= p->match) {
            return false;
        }
        progress_become_probe(p, now);
        return true;
    }
    /* In PROBE only the answer to the outstanding probe counts.
     * Invariant: next >= match + 1 >= 1. */
    if (reject != p->next - 1) {
        return false;
    }
    next = reject;
    if (hint + 1 < next) {
        next = hint + 1;
    }
    if (conflict != 0 && conflict < next) {
        next = conflict;
    }
    if (next < p->match + 1) {
        next = p->match + 1;
    }
    p->next = next;
    p->paused = false;
    return true;
}

bool progress_is_paused(const struct raft_peer_progress *p)
{
    if (p->state == RAFT_PROGRESS_PROBE) {
        return p->paused;
    }
    return p->n_inflight >= p->cap_inflight;
}

void progress_sent(struct raft_peer_progress *p, raft_index last,
                   unsigned n_entries)
{
    if (p->state == RAFT_PROGRESS_PROBE) {
        p->paused = true;
        return;
    }
    if (n_entries == 0) {
        return;
    }
    p->next = last + 1;
    /* Invariant: the window is not full (checked by progress_is_paused). */
    p->inflights[(p->start_inflight + p->n_inflight) % p->cap_inflight] =
        last;
    p->n_inflight++;
}

void progress_free_le(struct raft_peer_progress *p, raft_index index)
{
    while (p->n_inflight > 0 && p->inflights[p->start_inflight] <= index) {
        p->start_inflight = (p->start_inflight + 1) % p->cap_inflight;
        p->n_inflight--;
    }
}
