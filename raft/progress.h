/* What a leader tracks for one follower (etcd tracker/progress.go and
 * inflights.go): match and next index, PROBE or REPLICATE state, and the
 * window of pipelined AppendEntries not yet answered. */

#ifndef RAFT_PROGRESS_H
#define RAFT_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "raft.h"

/* One follower's replication progress.
 * Invariant: match < next.
 * Invariant: in PROBE, n_inflight == 0; in REPLICATE, the inflight ring
 * holds the last index of each unanswered AppendEntries, increasing. */
struct raft_peer_progress {
    raft_index match;        /* highest index known durable on the peer */
    raft_index next;         /* next index to send */
    uint8_t state;           /* enum raft_progress_state */
    bool paused;             /* PROBE: one AppendEntries is outstanding */
    uint64_t last_progress;  /* time (ms) match last rose or state changed */
    raft_index *inflights;   /* ring of last indexes, cap_inflight long */
    unsigned start_inflight; /* ring position of the oldest */
    unsigned n_inflight;     /* number of unanswered AppendEntries */
    unsigned cap_inflight;   /* window size, max_inflight_msgs */
};

/* progress_init allocates @p's inflight ring of @cap (>= 1) slots and
 * resets it to PROBE with match 0 and next 1. Errors: RAFT_NOMEM. */
int progress_init(struct raft_peer_progress *p, unsigned cap);

/* progress_close frees @p's ring. */
void progress_close(struct raft_peer_progress *p);

/* progress_reset starts tracking anew for a new leader term: PROBE,
 * match 0, next @next, at time @now. */
void progress_reset(struct raft_peer_progress *p, raft_index next,
                    uint64_t now);

/* progress_become_probe moves to PROBE at next = match + 1, unpaused,
 * with an empty window. */
void progress_become_probe(struct raft_peer_progress *p, uint64_t now);

/* progress_become_replicate moves to REPLICATE at next = match + 1 with an
 * empty window. */
void progress_become_replicate(struct raft_peer_progress *p, uint64_t now);

/* progress_maybe_update records that the peer holds [1, @index] durably:
 * raises match (and next past it). Returns true when match rose. */
bool progress_maybe_update(struct raft_peer_progress *p, raft_index index,
                           uint64_t now);

/* progress_maybe_decr handles a rejection of an AppendEntries whose
 * prev_log_index was @reject with the peer's last index @hint and the first
 * index @conflict of its conflicting term (0 when none). Returns false when
 * the rejection is stale (ignored); otherwise lowers next to
 * min(@reject, @hint + 1, @conflict), never below match + 1, and returns
 * true: one round trip skips the peer's whole conflicting term. In
 * REPLICATE it moves to PROBE at match + 1 instead. */
bool progress_maybe_decr(struct raft_peer_progress *p, raft_index reject,
                         raft_index hint, raft_index conflict, uint64_t now);

/* progress_is_paused tells whether no AppendEntries with entries may be
 * sent now: PROBE with one outstanding, or REPLICATE with a full window. */
bool progress_is_paused(const struct raft_peer_progress *p);

/* progress_sent records an AppendEntries just sent whose entries end at
 * @last (@n_entries of them): pauses PROBE; in REPLICATE advances next
 * optimistically and fills one window slot. */
void progress_sent(struct raft_peer_progress *p, raft_index last,
                   unsigned n_entries);

/* progress_free_le frees every window slot whose last index is <= @index
 * (those AppendEntries are answered). */
void progress_free_le(struct raft_peer_progress *p, raft_index index);

#endif /* RAFT_PROGRESS_H */
