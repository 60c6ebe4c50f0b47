/* The leader's proposals: each request payload is stamped with the
 * leader's wall clock and a seed for the deterministic random(), then
 * appended to the log in one batch. Used for this node's own callers
 * (exec.c) and for the followers' forwarded requests (forward.c). */

#ifndef EXT_PROPOSE_H
#define EXT_PROPOSE_H

#include <stdint.h>

#include "../raft/raft.h"
#include "../raft/uv_node.h"

/* The proposer of one node: the PRNG of the entry seeds. Its fields
 * belong to propose.c. */
struct ext_propose {
    uint64_t seed_state; /* splitmix64 state (loop thread) */
};

/* propose_init seeds @p with @seed (a random value per run). */
void propose_init(struct ext_propose *p, uint64_t seed);

/* propose_batch stamps @n request payloads (@payloads; not changed, the
 * stamped copies are new) with the wall clock (ms) and one seed each, and
 * proposes them to driver @d as one batch; *out_index and *out_term give
 * the first new entry. Errors: RAFT_CORRUPT (a payload is no request),
 * RAFT_NOMEM, and raft_uv_node_propose's (RAFT_NOTLEADER, RAFT_IOERR,
 * RAFT_SHUTDOWN). Loop thread of @d. */
int propose_batch(struct ext_propose *p, struct raft_uv_node *d,
                  struct raft_buf *const *payloads, unsigned n,
                  raft_index *out_index, raft_term *out_term);

#endif /* EXT_PROPOSE_H */
