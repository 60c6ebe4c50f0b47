/* The write lease: one plain SQL write transaction at a time, cluster-wide,
 * as SQLite has one writer on one file. The leader grants the lease to a
 * host connection before that connection takes the file's write lock; the
 * transaction's effect (a changeset, sql/changeset.h) becomes the next log
 * entry, appended only under the lease in force. The holder is a
 * connection of the leader's node, or of a follower's: a follower's
 * holder asks the leader with LEASE frames (raft/frame.h, wire version
 * 5): ASK (the leader grants, answering the lease id and its last index
 * G), COMMIT (the changeset, under that id: the leader appends it as
 * entry G + 1 and answers once a quorum committed it, or that it could
 * not; a resend of a lost one gets the same answer) and RELEASE (a
 * rollback: no answer; a lost one ends at lease_timeout_ms). The
 * follower holds its own applier from G + 1, as the leader does for its
 * own holders, so the holder's local commit is the entry's, and the
 * leader's applier replays the entry like any other. The holder's
 * connection may be of the node's own process or of another process of
 * its machine, through its attach socket (a holder token per socket
 * connection, surface/attach_server.c).
 *
 * Ordering between the holder (a host thread), the loop and the applier:
 *   1. acquire (holder): asks the loop, which grants when this node leads,
 *      no lease is out, and every member can apply changeset entries
 *      (wire_gate_changeset). The grant notes the leader's last index G
 *      and holds the applier at G + 1 (applier_lease_hold): nothing above
 *      G applies until the hold ends. The holder then waits until this
 *      node applied G, so its transaction reads the latest committed
 *      state.
 *   2. while the lease is in force the loop proposes no request: this
 *      node's raft_exec calls and the followers' forwarded requests wait
 *      (lease_holds_back), nor does a first leader its cluster id entry
 *      (node.c). A membership change (an operator's, a join's, the
 *      leader's automatic promotion) waits for the lease to end, while
 *      no new lease is granted, LEASE_CORE_CHANGE_WAIT_MS at most (a
 *      stuck writer must not block raft_remove): then it goes, and a
 *      lease whose leader appended anything after G has its commit
 *      refused, not applied, so the changeset is always entry G + 1,
 *      the first entry after the state its transaction read.
 *   3. commit (holder, inside its commit hook, holding the WAL write
 *      lock): the loop checks the id is the lease in force and appends
 *      the changeset unstamped as entry G + 1; the lease ends there
 *      (requests go again, behind it). The holder waits until the commit
 *      index reaches G + 1 (not its apply: its own local commit is what
 *      puts the entry in this replica's file).
 *   4. release (the surface, once the connection's local commit or
 *      rollback is done and the write lock released): the applier hold
 *      ends; the applier's next batch starts with entry G + 1, which the
 *      file already shows (the writer's own commit: only recorded), or
 *      replays it (no local commit happened). The applier looks for
 *      foreign commits neither while held nor until it applied G + 1
 *      (applier_lease_end), so the writer's commit is never taken for
 *      one; the release carries the writer's readings of the WAL-index
 *      header under its write lock (sql.h, "Who committed around a
 *      plain write"), by which that batch tells the writer's commit
 *      from another process's in the same window, or else confirms the
 *      entry by a scan.
 * A holder that never releases: the lease ends at lease_timeout_ms after
 * its grant, and the applier hold lease_timeout_ms after the later of the
 * grant and the commit's return. A leader change ends the lease at once
 * (a commit in flight answers "outcome unknown"); the hold stays until
 * release or its deadline, since the holder's connection may still hold
 * the write lock.
 *
 * Lease ids are (term << 32) | n, n counting the grants of this node's
 * life from 1: they increase, and are never reused, since a node that
 * leads again after a restart does so in a higher term (a lease is
 * granted only once the leader's term is durable: raft_term_durable).
 * A follower's commit that reaches a leader which does not remember its
 * lease (granted before a restart of the leader) is answered "outcome
 * unknown": the changeset may be in the log.
 *
 * The rules live in lease_core.h (pure: the simulation runs them too);
 * this module runs them for the node's threads.
 *
 * Invariant: at most one lease is in force or asked for, and at most one
 * applier hold is out, per node; a hold and a lease in force have the
 * same id. */

#ifndef EXT_LEASE_H
#define EXT_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../raft/histogram.h"
#include "../../raft/raft.h"
#include "../../raft/uv_node.h"
#include "applier.h"
#include "leader_call.h"

/* The lease as raft_status() shows it. */
struct ext_lease_view {
    bool in_force;    /* a lease is out: the fields below are set */
    uint64_t holder;  /* the holder's token (on its server) */
    raft_id server;   /* the holder's server */
    uint64_t id;      /* the lease id */
    uint64_t age_ms;  /* since its grant */
    bool held;        /* the applier waits for the holder's release (the
                        lease may have ended with its proposal) */
    unsigned queued;  /* writers of this node waiting for the lease */
    uint64_t n_holds; /* leases granted to writers of this node since
                          start (counted at the grant) */
    uint64_t n_waits; /* asks of writers of this node that found the
                          lease out (held elsewhere, another writer
                          first, or no leader) and waited */
    uint64_t n_busy;  /* asks that gave up waiting (SQLITE_BUSY) */
    struct raft_histogram hold_seconds; /* from each grant to a writer of
                          this node to its release, s */
    unsigned n_line;                    /* servers in the leader's line
                          (lease_core_line; a follower's own writers'
                          busy answers too: status shows it on the
                          leader only) */
    raft_id line[RAFT_MAX_SERVERS];     /* first in line first */
    uint64_t line_ms[RAFT_MAX_SERVERS]; /* how long each has waited */
};

struct ext_lease; /* opaque */

/* lease_new creates the lease state of server @self: leases last
 * @lease_timeout_ms, a holder's commit waits at most @exec_timeout_ms,
 * and a changeset over @max_bytes is refused. Errors: RAFT_NOMEM. Any
 * thread. */
int lease_new(raft_id self, unsigned lease_timeout_ms, unsigned exec_timeout_ms,
              uint64_t max_bytes, struct ext_lease **out);

/* lease_set_change_test gives @l the test @waiting (called with @arg on
 * the loop thread, under @l's lock; change_waits_for_lease) that says
 * whether a membership change waits for the lease in force to end: this
 * leader grants no lease meanwhile (its askers are answered busy and ask
 * again). Before lease_attach; any thread. */
void lease_set_change_test(struct ext_lease *l, bool (*waiting)(void *arg),
                           void *arg);

/* lease_attach gives @l the running driver @d (which holders wake) and
 * the applier @a (held and asked for its applied index); both must
 * outlive @l's callers. Before any lease_acquire; any thread. */
void lease_attach(struct ext_lease *l, struct raft_uv_node *d,
                  struct ext_applier *a);

/* lease_free frees @l. NULL is ignored. No caller may wait in it. */
void lease_free(struct ext_lease *l);

/* lease_acquire is ext_node_lease_acquire (node.h): queues behind the
 * other writers of this node asking for the lease, in the order they
 * came (a busy handler's retry, within 250 ms of its busy answer, keeps
 * its place, and waits up to 250 ms rather than 20 when a writer that
 * came after it took the turn meanwhile), asks the loop
 * for the lease for @holder when first, then waits until this node
 * applied the grant's index. With @one_try (EXT_LEASE_ONE_TRY), a
 * refusal for want of a leader is asked again for up to exec_timeout_ms
 * rather than 250 ms, and the catch-up waits up to exec_timeout_ms
 * whether or not the applied index moves. Writes *@out_id on success
 * only; @why (@why_len bytes) says why not. Errors: RAFT_BUSY (after up
 * to 250 ms in the queue: another holder has it, @why names it; no leader
 * known yet; another writer of this node was ahead; the leader did not
 * answer, or this node did not catch up, within exec_timeout_ms), RAFT_FORMAT (a member's wire
 * version is too old for changeset entries, or not known yet; the
 * leader's has no LEASE frames), RAFT_NOSPACE (this node's log cannot
 * take entries: disk full, a failed log, or its applier fails; refused
 * at once, so a write cannot hold the lease while it cannot catch up),
 * RAFT_NOTFOUND (this node was removed from the cluster,
 * lease_set_removed: it receives no entries, so it cannot catch up;
 * refused at once, also while waiting to catch up), RAFT_SHUTDOWN,
 * RAFT_INVALID (@holder is 0). Any host thread; never the loop's. */
int lease_acquire(struct ext_lease *l, uint64_t holder, bool one_try,
                  uint64_t *out_id, char *why, size_t why_len);

/* lease_patience_ms returns how long writer @holder may wait now for
 * something that holds plain writes back before it is answered
 * RAFT_BUSY, ms: 250 (EXT__LEASE_QUEUE_MS), or 20 when it was answered
 * busy within the last 250 ms (its busy handler's retry: SQLite's busy
 * timeout counts only the handler's own sleeps, so a longer wait at each
 * retry would stretch it many times over). Any host thread. */
uint64_t lease_patience_ms(struct ext_lease *l, uint64_t holder);

/* lease_note_busy records that writer @holder was answered RAFT_BUSY by
 * something other than lease_acquire (the start's scan runs), so that
 * its retry's lease_patience_ms and queue wait are the short ones and
 * it keeps its place in the queue, and counts it in lease_view's busy answers. Any host thread. */
void lease_note_busy(struct ext_lease *l, uint64_t holder);

/* lease_set_removed tells @l whether this node is @removed from the
 * cluster, by the committed configuration entry @conf_index (0 when that
 * came in a snapshot); false when it is a member, or was added back.
 * While removed, lease_acquire refuses at once. Any thread (the loop's,
 * as the node judges its staleness). */
void lease_set_removed(struct ext_lease *l, bool removed,
                       raft_index conf_index);

/* lease_commit is ext_node_lease_commit (node.h): proposes changeset @p
 * (@len bytes, copied) under lease @id and waits until a quorum commits
 * it. Errors ("not applied": nothing was appended): RAFT_INVALID (@p is
 * no changeset, or @id is not a lease of this node: never granted,
 * released), RAFT_TOOBIG (over max_request_bytes), RAFT_TIMEOUT (the
 * lease expired at lease_timeout_ms, or the loop did not take the
 * proposal within exec_timeout_ms), RAFT_NOTLEADER (a leader change
 * ended the lease, or the leader appended another entry after the grant:
 * a membership change), RAFT_CANCELED (@probe said the caller was
 * interrupted before the proposal: "interrupted: not applied"),
 * RAFT_SHUTDOWN, RAFT_NOMEM, RAFT_DIVERGED (@locked, the holder's
 * reading of the WAL-index header as it took the write lock, NULL when
 * not known, is not the applier's: applier_wal_base_is); and
 * RAFT_UNKNOWN (proposed, but no commit
 * seen within exec_timeout_ms, leadership lost, the leader restarted,
 * the node shutting down, or the caller interrupted: "interrupted:
 * outcome unknown"). The lease
 * ends with the call, whatever the outcome; the applier hold stays until
 * lease_release. The lease's holder, on a host thread. */
int lease_commit(struct ext_lease *l, uint64_t id, const void *p, size_t len,
                 const struct ext_exec_probe *probe,
                 const unsigned char *locked, char *why, size_t why_len);

/* lease_release is ext_node_lease_release (node.h): ends lease @id
 * without an entry if it is in force, and ends the applier hold of @id
 * (unless its commit still waits), handing the applier the holder's
 * @marks (applier_lease_end; NULL: not known); when @id's changeset
 * committed, it then waits until this node applied it (at most
 * exec_timeout_ms), so the holder's COMMIT returns with its entry
 * applied here. Idempotent; an id not in force is ignored. Any
 * thread. */
void lease_release(struct ext_lease *l, uint64_t id,
                   const struct sql_wal_marks *marks);

/* lease_holds_back says whether the leader must propose no request now:
 * a lease is in force (granted, its changeset not proposed yet). Any
 * thread (the loop asks it at each wake and tick). */
bool lease_holds_back(struct ext_lease *l);

/* lease_on_loop grants an asked lease, proposes a queued changeset,
 * notes a commit, and ends leases that expired or lost their leader and
 * holds past their deadline, through driver @d. Loop thread of @d: at
 * every wake and tick, before requests are proposed, and after each step
 * of the core (commits). Never call it holding a lock another loop
 * callback takes. */
void lease_on_loop(struct ext_lease *l, struct raft_uv_node *d);

/* lease_shutdown ends every lease, answers the waiting holders (not
 * applied, or outcome unknown once proposed), ends the hold and refuses
 * new leases. Any thread. */
void lease_shutdown(struct ext_lease *l);

/* lease_is_frame says whether @f is a LEASE frame or its result, which
 * lease_on_frame takes. Any thread. */
bool lease_is_frame(const struct raft_frame *f);

/* lease_on_frame takes frame @f (lease_is_frame) from a peer, through
 * driver @d: on the leader a follower's ask (granted, or answered busy),
 * commit (appended under its lease, answered once committed) or release;
 * on a follower the leader's answer to this node's holder's ask or
 * commit. A frame that answers nothing waited for is dropped (a grant
 * nobody waits for is released at once). Loop thread of @d. */
void lease_on_frame(struct ext_lease *l, struct raft_uv_node *d,
                    const struct raft_frame *f);

/* lease_end ends the write lease this node granted, if one is in force
 * (raft_lease_end: an operator frees the cluster from a writer stuck
 * with its transaction open): its holder's commit is then refused, not
 * applied, and the writes held back go. Writes what it ended into @msg
 * (@msg_len bytes). Errors: RAFT_NOTFOUND (none in force here: the
 * leader grants them; or its changeset is being appended right now).
 * Any thread. */
int lease_end(struct ext_lease *l, char *msg, size_t msg_len);

/* lease_copy_begin opens a copy of this node's file (a snapshot, a
 * raft_backup: struct sql_copy_gate in sql/sql.h): a holder of this node
 * commits its entry to the file itself, before the apply thread records
 * it, so from now until lease_copy_end no holder answered committed
 * goes on to that commit. Returns the last entry a holder did commit so
 * (0: none): the copy's read transaction may begin once this node applied
 * it (applier_wait_applied). Any thread. */
raft_index lease_copy_begin(struct ext_lease *l);

/* lease_copy_end ends lease_copy_begin's hold: holders waiting to commit
 * to the file go on. Once for each lease_copy_begin. Any thread. */
void lease_copy_end(struct ext_lease *l);

/* lease_view fills @out with the lease in force. Any thread. */
void lease_view(struct ext_lease *l, struct ext_lease_view *out);

#endif /* EXT_LEASE_H */
