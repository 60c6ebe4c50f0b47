/* Membership changes and leadership transfers from callers: a
 * caller thread submits one and waits; the loop thread steps it on the
 * leader (RAFT_EVENT_CHANGE or RAFT_EVENT_TRANSFER) or forwards it to the
 * leader; the caller is answered once the change is committed (not merely
 * appended) and this node's member view shows it, the leadership has
 * moved, or exec_timeout_ms passed. The caller's wait and the resend are
 * one call to the leader (leader_call.h). It also owns the leader's
 * automatic promotion of caught-up learners, a joining node's JOIN
 * requests, and the member view raft_members shows. */

#ifndef EXT_CHANGE_H
#define EXT_CHANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/frame.h"
#include "../../raft/raft.h"
#include "../../raft/uv_node.h"
#include "change_codec.h"
#include "change_join.h"
#include "config.h"
#include "exec.h"
#include "member_view.h"

struct ext_change; /* opaque */

/* change_new creates the membership side of node @cfg (settings copied:
 * the timeouts, and cluster= addresses used where a configuration holds
 * none); its requests' sequence numbers start after @first_seq (below
 * 2^62: a random point of each start, so that no id repeats one of an
 * earlier run, which a leader remembering its answers by id would answer
 * with that run's outcome). Errors: RAFT_NOMEM. Any thread. */
int change_new(const struct ext_config *cfg, uint64_t first_seq,
               struct ext_change **out);

/* change_attach gives @c the running driver @d. Before any change_submit;
 * any thread. */
void change_attach(struct ext_change *c, struct raft_uv_node *d);

/* change_set_lease_test gives @c the test @held (called with @arg on
 * the loop thread; lease_holds_back) that says whether a write lease this
 * leader granted is in force: a membership change that finds one waits
 * for its end, LEASE_CORE_CHANGE_WAIT_MS at most (lease_core.h), so that
 * the transaction holding it is not refused. Before change_attach; any
 * thread. */
void change_set_lease_test(struct ext_change *c, bool (*held)(void *arg),
                           void *arg);

/* change_waits_for_lease says whether a membership change waits for the
 * lease in force to end (change_set_lease_test): no new lease may be
 * granted meanwhile. Loop thread. */
bool change_waits_for_lease(const struct ext_change *c);

/* change_waiting_count returns how many membership changes waited for
 * the lease in force to end at the loop's latest look (raft_status()).
 * Any thread. */
unsigned change_waiting_count(struct ext_change *c);

/* change_free frees @c. NULL is ignored. No caller may wait in it. */
void change_free(struct ext_change *c);

/* change_submit runs request @req (copied) and waits until it is done,
 * @timeout_ms passes or @probe (may be NULL) says the caller was interrupted.
 * A change is done once its entry is committed, and answered once this node's
 * member view (change_members) holds that entry or a later one, an election
 * timeout after the answer at most (a removed follower may never see it; an
 * interrupt that comes meanwhile is not taken: the change is done); a transfer
 * is done once this node saw another leader take over. One request at a time
 * per node: a second caller is refused at once (RAFT_BUSY). Always fills @out;
 * returns out->rc. Errors: RAFT_BUSY (another request runs here, or the leader
 * has a change pending or a transfer running), RAFT_NOTFOUND (no such member),
 * RAFT_INVALID (the change does not apply: a member already, the last
 * voter...), RAFT_NOTLEADER (no leader), RAFT_TIMEOUT, RAFT_UNKNOWN,
 * RAFT_CANCELED, RAFT_SHUTDOWN, RAFT_NOMEM; out->errmsg says which, in words.
 * Any thread but the loop's. */
int change_submit(struct ext_change *c, const struct ext_change_request *req,
                  unsigned timeout_ms, const struct ext_exec_probe *probe,
                  struct ext_change_result *out);

/* change_shutdown fails the waiting caller with "shutting down" and
 * refuses new ones. Any thread. */
void change_shutdown(struct ext_change *c);

/* change_members copies the member view last published by the loop
 * thread (at most @max rows) into @rows and returns how many there are.
 * Any thread. */
unsigned change_members(struct ext_change *c, struct ext_member_row *rows,
                        unsigned max);

/* change_joining_why copies into @buf (@len bytes, NUL-terminated) the
 * last refusal this joining node heard in answer to its JOIN, in words
 * ("" for none, or once a JOIN was accepted): what member_why can add to
 * "joining: ...". Any thread. */
void change_joining_why(struct ext_change *c, char *buf, size_t len);

/* change_on_request takes a change request forwarded by a peer: a leader
 * steps it and answers once it is done; a follower answers
 * RAFT_NOTLEADER. Loop thread of @d. */
void change_on_request(struct ext_change *c, struct raft_uv_node *d,
                       const struct raft_frame *m);

/* change_on_result takes the leader's answer to this node's forwarded
 * request, or to one it relayed for a peer (passed on through @d). Loop
 * thread of @d. */
void change_on_result(struct ext_change *c, struct raft_uv_node *d,
                      const struct raft_frame *m);

/* change_on_wake dispatches a newly submitted request through @d. Loop
 * thread of @d. */
void change_on_wake(struct ext_change *c, struct raft_uv_node *d);

/* change_on_tick retries, finishes what committed, promotes caught-up
 * learners (leader), sends JOIN requests (a joining node) and publishes
 * the member view. Loop thread of @d. */
void change_on_tick(struct ext_change *c, struct raft_uv_node *d);

#endif /* EXT_CHANGE_H */
