/* Repairing a diverged replica (a commit the node did not make reached its
 * database: applier.h, applier_diverged): a follower asks the leader for a
 * fresh snapshot (RAFT_FRAME_REPAIR_REQUEST), which replaces its database;
 * a leader first hands its leadership on. Automatic by default, or on
 * raft_repair() with repair=manual. */

#ifndef EXT_REPAIR_H
#define EXT_REPAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "applier.h"
#include "exec.h"
#include "node_log.h"

struct raft_uv_node; /* raft/uv_node.h */

/* Where a repair stands, for raft_status() ("diverged"."repair"). */
enum ext_repair_phase {
    EXT_REPAIR_NONE = 0,       /* not diverged */
    EXT_REPAIR_MANUAL = 1,     /* repair=manual: waits for raft_repair() */
    EXT_REPAIR_TRANSFER = 2,   /* leading: handing the leadership on */
    EXT_REPAIR_REQUESTED = 3,  /* asked the leader for a snapshot */
    EXT_REPAIR_NO_LEADER = 4,  /* no leader known to ask */
    EXT_REPAIR_NO_PEER = 5,    /* the only voter: nobody to repair from */
    EXT_REPAIR_OLD_LEADER = 6, /* the leader speaks wire version 1 */
    EXT_REPAIR_NO_HEALTHY = 7, /* leading, and every other voter asked
                                  for a repair too: nobody to hand the
                                  leadership to */
};

/* A peer that sent a REPAIR_REQUEST within this long is taken as
 * diverged (it asks once every retry_ms until repaired), ms. */
#define EXT__REPAIR_DIVERGED_MS 3000

struct ext_repair; /* opaque */

/* repair_new creates the repair policy of server @id: automatic unless
 * @manual; lines go to @log (must outlive it). Errors: RAFT_NOMEM. Any
 * thread. */
int repair_new(uint64_t id, bool manual, struct ext_node_log *log,
               struct ext_repair **out);

/* repair_free frees @r (NULL is ignored). Any thread, after the loop
 * stopped. */
void repair_free(struct ext_repair *r);

/* repair_on_tick moves a repair on: when @a is diverged and a repair is due
 * (automatic, or asked by repair_ask), a leader hands its leadership to the
 * most caught-up voter that has not asked it for a repair within
 * EXT__REPAIR_DIVERGED_MS (a transfer, tried again every @retry_ms), or, when
 * every other voter did, stays and says so (status and one ERROR line); a
 * follower asks the leader for a snapshot at least at its applied index, once
 * every @retry_ms and at once of a new leader (one leader call, leader_call.h:
 * a leader that handed its leadership on asks the new one at once), while the
 * leader's wire version has the frame. While diverged, the driver declines
 * leadership transfers (it asks the applier: raft_uv_node_callbacks.diverged).
 * Logs "repaired from server N's snapshot at index I" once an install ended a
 * divergence. Returns true on the tick that first sees a divergence (the node
 * then tells its waiting callers). Loop thread. */
bool repair_on_tick(struct ext_repair *r, struct raft_uv_node *d,
                    struct ext_applier *a, unsigned retry_ms);

/* repair_ask makes the next tick start a repair (raft_repair()), also with
 * repair=manual. Any thread. */
void repair_ask(struct ext_repair *r);

/* repair_phase returns where the repair stands (enum ext_repair_phase)
 * and, in @out_peer, the server it asked, hands the leadership to or
 * repairs from (0 for none). Any thread. */
int repair_phase(const struct ext_repair *r, uint64_t *out_peer);

/* repair_wait is raft_repair(): it asks for a repair now (repair_ask),
 * wakes the loop of @d, and waits until an install ended the divergence
 * of @a, @timeout_ms at most, or until @probe (may be NULL) says the
 * caller was interrupted; @msg (@msg_len bytes) says what happened.
 * Errors: RAFT_INVALID (not diverged), RAFT_NOTFOUND (no peer to repair
 * from), RAFT_TIMEOUT, RAFT_CANCELED (the repair goes on). Any thread but
 * the loop's. */
int repair_wait(struct ext_repair *r, struct ext_applier *a,
                struct raft_uv_node *d, unsigned timeout_ms,
                const struct ext_exec_probe *probe, char *msg, size_t msg_len);

/* repair_refusal writes why a write through this node is refused into
 * @out (@len bytes) and returns true when @a is diverged ("diverged
 * replica: <what was seen>; <where the repair stands>"); false, with @out
 * untouched, when it is not. Any thread. */
bool repair_refusal(struct ext_repair *r, struct ext_applier *a, char *out,
                    size_t len);

/* repair_describe writes where the repair of @r stands, one phrase
 * ("asked server 1 for a snapshot"), into @out (@len bytes). Any
 * thread. */
void repair_describe(struct ext_repair *r, char *out, size_t len);

#endif /* EXT_REPAIR_H */
