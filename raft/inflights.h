/* The window of pipelined AppendEntries a leader has in flight to one
 * follower (etcd tracker/inflights.go): a ring, oldest first, of the
 * request number, last entry index and payload bytes of each message not
 * yet answered, bounded in messages and in bytes. */

#ifndef RAFT_INFLIGHTS_H
#define RAFT_INFLIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "raft.h"

/* One AppendEntries in flight. */
struct raft_inflight {
    uint64_t seq;    /* its request number */
    raft_index last; /* index of its last entry */
    uint64_t bytes;  /* payload bytes of its entries */
};

/* The ring.
 * Invariant: from the oldest on, seq and last strictly increase, and
 * bytes is the sum of the members' bytes. */
struct raft_inflights {
    struct raft_inflight *ring; /* cap slots */
    unsigned start;             /* slot of the oldest */
    unsigned n;                 /* members */
    unsigned cap;               /* most members, max_inflight_msgs */
    uint64_t bytes;             /* payload bytes of the members */
    uint64_t max_bytes;         /* most bytes, 0 for no limit */
};

/* inflights_init allocates a ring of @cap (>= 1) slots, empty, limited to
 * @max_bytes payload bytes (0: unlimited). Writes @f only on success.
 * Errors: RAFT_NOMEM. */
int inflights_init(struct raft_inflights *f, unsigned cap, uint64_t max_bytes);

/* inflights_close frees the ring. */
void inflights_close(struct raft_inflights *f);

/* inflights_reset empties the window. */
void inflights_reset(struct raft_inflights *f);

/* inflights_room returns how many payload bytes a new message may carry
 * without exceeding the byte limit: UINT64_MAX without a limit, 0 when
 * the window is full in messages or bytes. An empty window always has
 * room (a message larger than the limit goes alone). */
uint64_t inflights_room(const struct raft_inflights *f);

/* inflights_full tells whether no message may be added now. */
bool inflights_full(const struct raft_inflights *f);

/* inflights_add records a message sent with request number @seq, whose
 * entries end at @last and carry @bytes payload bytes. The window must
 * not be full and @seq and @last must exceed the newest member's. */
void inflights_add(struct raft_inflights *f, uint64_t seq, raft_index last,
                   uint64_t bytes);

/* inflights_free_le frees the oldest members while their last index is
 * at most @index (a cumulative acknowledgement: they are answered), so
 * members always leave in request order. Returns the seq of the newest
 * member freed, 0 when none was. */
uint64_t inflights_free_le(struct raft_inflights *f, raft_index index);

/* inflights_oldest returns the oldest member, NULL when empty. */
const struct raft_inflight *inflights_oldest(const struct raft_inflights *f);

/* inflights_at returns the @i-th member from the oldest (i < n). */
const struct raft_inflight *inflights_at(const struct raft_inflights *f,
                                         unsigned i);

#endif /* RAFT_INFLIGHTS_H */
