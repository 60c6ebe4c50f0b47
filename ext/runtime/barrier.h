/* Linearizable reads (raft_barrier, ReadIndex: thesis §6.4): a caller asks
 * for the leader's read index, confirmed by a heartbeat round of the
 * leader's core (raft/read_index.c), and waits until this node applied
 * it; plain SELECTs after that see every write acknowledged before the
 * call. A follower asks its leader with a RAFT_FRAME_READ_INDEX (wire
 * version 3 and later) and the leader answers with a READ_INDEX_RESULT.
 *
 * Happy path: caller registers a slot -> the loop steps READ_INDEX (a
 * leader) or sends READ_INDEX to the leader (a follower) -> the core
 * hands the read back ready (barrier_on_reads; on the leader of a
 * follower's read, a READ_INDEX_RESULT goes back) -> the caller waits for
 * the applied index to reach it.
 * Failure modes: no quorum confirmation within election_timeout_ms (a
 * partitioned old leader), leadership lost during the round, no leader,
 * a leader whose wire has no READ_INDEX, the caller interrupted, the
 * node shutting down: each a clear error, never a stale answer. */

#ifndef EXT_BARRIER_H
#define EXT_BARRIER_H

#include <stddef.h>
#include <stdint.h>

#include "../../raft/frame.h"
#include "exec.h"

struct raft_uv_node; /* raft/uv_node.h */
struct ext_applier;  /* applier.h */

struct ext_barrier; /* opaque */

/* barrier_new creates the barrier state of server @self; reads not
 * confirmed within @election_timeout_ms (plus a little slack for the
 * loop) fail, and a confirmed read whose index is not applied within
 * @apply_timeout_ms of the call fails too. Errors: RAFT_NOMEM. Any
 * thread. */
int barrier_new(raft_id self, unsigned election_timeout_ms,
                unsigned apply_timeout_ms, struct ext_barrier **out);

/* barrier_free frees @b; no caller may wait on it any more. NULL is
 * ignored. Thread: any, once the loop thread ended. */
void barrier_free(struct ext_barrier *b);

/* barrier_wait runs one barrier: registers it, wakes the loop (@d) and
 * waits until this node's applier @a applied the confirmed read index
 * (a follower applies at once meanwhile, applier_hurry_begin, not at its
 * follower_apply_ms pace), which goes to *@out_index (written only on
 * success), or until it
 * fails: @msg (@msg_len bytes) then says why, beginning with
 * "raft_barrier: ".
 * Errors: RAFT_TIMEOUT (no quorum confirmed the leader within
 * election_timeout_ms, or the index not applied in time), RAFT_NOTLEADER
 * (no leader known, or the leadership was lost during the round),
 * RAFT_FORMAT (the leader speaks a wire without READ_INDEX), RAFT_BUSY
 * (too many barriers wait), RAFT_CANCELED (@probe said the caller was
 * interrupted), RAFT_SHUTDOWN, RAFT_NOMEM, RAFT_DIVERGED (@a is diverged while
 * the index is not applied yet: nothing applies until a repair). Any
 * thread but the loop's. */
int barrier_wait(struct ext_barrier *b, struct raft_uv_node *d,
                 struct ext_applier *a, const struct ext_exec_probe *probe,
                 uint64_t *out_index, char *msg, size_t msg_len);

/* barrier_on_loop routes the barriers registered since the last call
 * (on every wake and tick): a leader steps READ_INDEX, a follower sends
 * READ_INDEX to its leader (again when the leader changed). Loop
 * thread. */
void barrier_on_loop(struct ext_barrier *b, struct raft_uv_node *d);

/* barrier_on_reads takes the reads the core handed back (the driver's
 * read callback): a local barrier's outcome, or a follower's, answered
 * with a READ_INDEX_RESULT. Loop thread. */
void barrier_on_reads(struct ext_barrier *b, struct raft_uv_node *d,
                      const struct raft_read *reads, unsigned n);

/* barrier_is_frame says whether @f is a READ_INDEX frame or its result.
 * Any thread. */
bool barrier_is_frame(const struct raft_frame *f);

/* barrier_on_frame takes a READ_INDEX (this node should lead: it steps
 * the read, or answers at once with why not) or a READ_INDEX_RESULT (the
 * answer to one of this node's). Loop thread. */
void barrier_on_frame(struct ext_barrier *b, struct raft_uv_node *d,
                      const struct raft_frame *f);

/* barrier_shutdown makes every waiting and later barrier_wait return
 * RAFT_SHUTDOWN. Any thread. */
void barrier_shutdown(struct ext_barrier *b);

#endif /* EXT_BARRIER_H */
