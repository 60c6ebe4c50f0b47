/* The leader's proposals: each request payload is stamped with the
 * leader's wall clock and a seed for the deterministic random(), then
 * appended to the log in one batch. Used for this node's own callers
 * (exec.c) and for the followers' forwarded requests (forward.c).
 *
 * "Now" never runs backwards in log order: the stamp is the wall clock,
 * but never below the floor, the latest stamp this node's log holds or
 * held (and its state machine applied: where the log was compacted or
 * replaced by a snapshot). The floor follows every entry the log takes
 * (propose_floor_note: the proposals themselves, the entries a follower
 * receives, so a new leader starts from its predecessor's last stamp
 * whether or not it applied it yet), starts from the log and the state
 * machine at start, and rises with each snapshot installed
 * (propose_floor_raise). Since every leader stamps at least what its
 * log holds, the stamps of any log never decrease: the floor is its
 * last one. It never goes down, even when entries it saw are truncated
 * (a conservative floor keeps the order all the same). */

#ifndef EXT_PROPOSE_H
#define EXT_PROPOSE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../raft/raft.h"
#include "../../raft/uv_node.h"

/* The proposer of one node: the PRNG of the entry seeds and the work
 * budget stamped into each request. Its fields belong to propose.c. */
struct ext_propose {
    uint64_t seed_state;           /* splitmix64 state (loop thread) */
    uint64_t max_steps;            /* max_request_steps, 0 for none */
    uint64_t id_window;            /* request_id_window (version 3 requests) */
    uint64_t id_window_ms;         /* request_id_window_ms */
    uint64_t max_result_bytes;     /* max_result_bytes */
    atomic_int_least64_t floor_ms; /* the stamp floor, ms since the epoch
                                      (INT64_MIN: none yet); raised by
                                      any thread, never lowered */
};

/* propose_init seeds @p with @seed (a random value per run); every
 * request it proposes gets the work budget @max_steps (SQLite VM steps, 0
 * for none), so that every node applies it with the leader's budget. */
void propose_init(struct ext_propose *p, uint64_t seed, uint64_t max_steps);

/* propose_floor_raise raises the stamp floor of @p to @time_ms (ms since
 * the epoch) if it is below: the latest stamp of a state machine at start
 * or after a snapshot install (sql_fsm_applied_time), or of entries seen.
 * Any thread. */
void propose_floor_raise(struct ext_propose *p, int64_t time_ms);

/* propose_floor_note raises the stamp floor of @p to the latest stamp
 * among the @n entries @entries (those of RAFT_ENTRY_NORMAL that carry a
 * request: sql_request_time, a header check each; the others carry no
 * stamp): the entries the log takes (the driver's appended callback) and
 * those it holds at start. Any thread. */
void propose_floor_note(struct ext_propose *p, const struct raft_entry *entries,
                        unsigned n);

/* propose_floor returns in *@out the stamp floor of @p, ms since the
 * epoch, and whether there is one (false before any stamp was seen).
 * Any thread. */
bool propose_floor(struct ext_propose *p, int64_t *out);

/* propose_set_ids sets what @p stamps into requests of format version 3
 * (a client request id or rows wanted): the id window by count
 * (@id_window ids) and by entry time (@id_window_ms), and the result cap
 * (@max_result_bytes), the leader's config keys. Before the loop runs. */
void propose_set_ids(struct ext_propose *p, uint64_t id_window,
                     uint64_t id_window_ms, uint64_t max_result_bytes);

/* propose_batch stamps @n request payloads (@payloads) with the wall
 * clock (ms) or the stamp floor if that is later (the floor then rises
 * to the stamp), one seed each and the work budget, and proposes them to
 * driver @d as one batch. A payload whose @fresh is true (@fresh may be
 * NULL: none) is stamped in place: the caller vouches that nothing
 * reads it any more but through this call, which it shows by accounting
 * for every holder of its bytes (raft_buf_holders: no entry, queued
 * write, disk job or retry shares it), which spares the loop a copy of
 * a request that may be tens of MiB; the others are copied and left as
 * they were. A payload stamped in place and then refused (an error) is
 * left stamped: it is stamped again when proposed again. *out_index and
 * *out_term give the first new entry. Errors: RAFT_CORRUPT (a payload is no request),
 * RAFT_FORMAT (a request of an older format), RAFT_NOMEM, and raft_uv_node_propose's (RAFT_NOTLEADER, RAFT_IOERR,
 * RAFT_SHUTDOWN). Loop thread of @d. */
int propose_batch(struct ext_propose *p, struct raft_uv_node *d,
                  struct raft_buf *const *payloads, const bool *fresh,
                  unsigned n, raft_index *out_index, raft_term *out_term);

#endif /* EXT_PROPOSE_H */
