/* The leader's side of forwarding (thesis §6.2): requests that followers
 * send in RAFT_FRAME_FORWARD frames are held until the loop's next wake, so
 * that every request read in one loop iteration is proposed as one batch
 * (one append, one AppendEntries per follower), then each follower is
 * answered with its entry's index and term (RAFT_FRAME_FORWARD_RESULT).
 * The origin's side (waiting callers) is exec.c's. */

#ifndef EXT_FORWARD_H
#define EXT_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "../../raft/frame.h"
#include "../../raft/uv_node.h"
#include "propose.h"

/* What forwarding asks the node, called with @data on the loop thread. */
struct ext_forward_ops {
    void *data;
    /* Whether a request of format version 3 may be proposed now
     * (wire_gate.h): 0, RAFT_FORMAT (a member speaks an older wire
     * version: refused) or RAFT_NOCONN (a member's version is not known
     * yet: the follower retries). NULL: always 0. */
    int (*admit_format3)(void *data);
    /* Whether a write lease holds new entries back now (lease.h): a
     * request is then refused with RAFT_BUSY, not held, and its follower
     * sends it again; its caller's deadline then says "not applied".
     * NULL: never. */
    bool (*held_back)(void *data);
};

struct ext_forward; /* opaque */

/* forward_new creates the forwarding state of server @self, refusing
 * requests over @max_request_bytes (plus the request header's headroom),
 * proposing through @propose (the node's proposer, borrowed: it outlives
 * @out, and only the loop thread uses it) and asking @ops (copied).
 * Errors: RAFT_NOMEM. Thread: any. */
int forward_new(raft_id self, uint64_t max_request_bytes,
                struct ext_propose *propose, const struct ext_forward_ops *ops,
                struct ext_forward **out);

/* forward_free drops the requests still held (their senders retry) and
 * frees @f. NULL is ignored. Thread: the loop thread, or any once it
 * ended. */
void forward_free(struct ext_forward *f);

/* forward_on_request takes a RAFT_FRAME_FORWARD @m that driver @d
 * received: refused at once (@d does not lead, or its log failed; too
 * big, malformed, a request of format 3 that
 * ops.admit_format3 refuses, out of memory; RAFT_BUSY while
 * ops.held_back says a write lease holds entries back) with a FORWARD_RESULT
 * naming why, else held for forward_propose_held (and the loop woken for
 * the first one). A copy of a request still held (same sender and request
 * id) is dropped: the held one is answered. A copy of one of the last 256
 * proposed is answered with the index and term the first one got, and
 * not proposed again. Loop thread. */
void forward_on_request(struct ext_forward *f, struct raft_uv_node *d,
                        const struct raft_frame *m);

/* forward_propose_held proposes the requests held since the last call to
 * driver @d as one batch (propose_batch) and answers each sender: status
 * 0 with its index and term, or the proposal's error (RAFT_NOTLEADER
 * when @d no longer leads or its log failed). Loop thread of @d (on every
 * wake and tick). */
void forward_propose_held(struct ext_forward *f, struct raft_uv_node *d);

/* forward_refuse_held answers every request held with @status (not
 * proposed: RAFT_BUSY while a write lease holds new entries back) and
 * drops them; their followers send them again. Loop thread. */
void forward_refuse_held(struct ext_forward *f, struct raft_uv_node *d,
                         int status);

/* forward_n_held returns how many requests are held. Loop thread. */
unsigned forward_n_held(const struct ext_forward *f);

#endif /* EXT_FORWARD_H */
