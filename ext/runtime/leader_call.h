/* One call a node makes to its leader, and its caller's wait: a write
 * (exec.c), a membership change (change.c), a read index (barrier.c), a
 * repair request (repair.c, whose caller waits on the applier instead) or
 * any later request that asks the leader and waits for its answer. The
 * call's owner keeps its calls under its own mutex and writes their
 * results; this module owns what every such call does alike:
 *   - correlation: the owner's calls linked in a table and found by the
 *     request id an answer carries (leader_call_find);
 *   - the loop's walk: the next call of a table due to go to a server,
 *     marked SENT (leader_call_take_due);
 *   - the caller's wait: a deadline (CLOCK_MONOTONIC), the wait sliced
 *     to ask the caller's probe (sqlite3_interrupt) outside the owner's
 *     mutex, and how it ended: answered, expired ("outcome unknown" once
 *     the request left this node, else "not applied"), interrupted, or
 *     ended by a shutdown;
 *   - the loop's resend rule: a call sent to a leader is due to go again
 *     once it is overdue by a retry interval, or, for an owner whose
 *     policy follows the leader, once another server leads
 *     (leader_call_take_due, on the owner's wake and tick);
 *   - the wire gate: a call that needs a wire version at the server it
 *     goes to (leader_call_need_wire: a frame type's
 *     raft_frame_type_wire_min, EXT_WIRE_GATE_VERSION for a request of
 *     format 3) is refused while that server speaks an older one, or, for
 *     an owner whose policy waits for it, held back while its version is
 *     not known (leader_call_take_due): the owner only words the
 *     refusal. What wire version this node's own log takes (the leader
 *     admitting a request of format 3, also a forwarded one) stays the
 *     members rule of wire_gate.c, which the owner passes as its own;
 *   - a wait on a predicate (leader_call_poll), for what the applier
 *     moves rather than the loop (an index applied, a repair done),
 *     with the same deadline, probe and ends.
 *
 * Happy path: the caller opens a struct ext_leader_call on its stack in
 * its owner's table (leader_call_open, under the owner's mutex), wakes
 * the loop and calls leader_call_wait; the loop takes it as due (QUEUED,
 * leader_call_take_due marks it SENT) and sends it, or steps it into its
 * own core (then leader_call_taken); the answer, found by request id
 * (leader_call_find), makes it TAKEN (the leader took it: an apply or a
 * view remains) or DONE (leader_call_finish), and the wait returns
 * EXT_CALL_ANSWERED; the caller closes it (leader_call_close).
 * Failure modes: no leader or no answer until the deadline
 * (EXT_CALL_EXPIRED; the call's left_node tells which words), a leader
 * change or a lost frame (due again: the owner resends under the same
 * request id), the server it would go to on a wire version older than
 * the call needs (leader_call_take_due returns it refused: its owner
 * answers it), the caller interrupted (EXT_CALL_INTERRUPTED within
 * poll_ms), the owner shutting down (EXT_CALL_SHUTDOWN). */

#ifndef EXT_LEADER_CALL_H
#define EXT_LEADER_CALL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "../../raft/raft.h"

/* How a waiting call learns that its caller gave up: @interrupted (with
 * @data) returns true once the caller's connection was interrupted
 * (sqlite3_interrupt, ^C in the shell, Python's Connection.interrupt()).
 * Called on the caller's thread, never under the owner's mutex, every
 * poll interval while it waits (EXT_EXEC_POLL_MS for a write). */
struct ext_exec_probe {
    bool (*interrupted)(void *data);
    void *data;
};

/* How often a waiting write or change asks its probe, ms. */
#define EXT_EXEC_POLL_MS 50

/* Where a call stands. Invariant: changed only under the owner's mutex;
 * DONE is final. */
enum ext_leader_call_state {
    EXT_CALL_QUEUED = 1, /* on this node: not seen by the loop yet, or
                            waiting for a leader (again) */
    EXT_CALL_SENT = 2,   /* handed to a leader, its answer awaited */
    EXT_CALL_TAKEN = 3,  /* the leader took it (an entry appended, a read
                            stepped into this node's own core, a change
                            answered): what remains happens here, never
                            sent again */
    EXT_CALL_DONE = 4,   /* over: the owner set its result */
};

/* How leader_call_wait ended. */
enum ext_leader_call_end {
    EXT_CALL_ANSWERED = 0,    /* DONE, or the call's predicate held */
    EXT_CALL_EXPIRED = 1,     /* the deadline passed (or the owner ended
                                 it so, leader_call_expire): outcome
                                 unknown when the call left_node, else not
                                 applied */
    EXT_CALL_INTERRUPTED = 2, /* the probe said the caller gave up */
    EXT_CALL_SHUTDOWN = 3,    /* the owner shut down (leader_call_shutdown) */
};

/* The loop's resend rule for the calls of one owner. */
struct ext_leader_call_policy {
    uint64_t retry_ms;  /* a SENT call unanswered this long (loop clock)
                           is due again */
    bool follow_leader; /* a SENT call is due again at once when the
                           server it would go to now is not the one it
                           went to */
    bool wait_for_wire; /* a call that needs a wire version stays QUEUED
                           while the server's is not known (not
                           connected yet); else it goes, and a send that
                           fails is taken back */
};

/* The server a walk's calls would go to, as the owner's loop sees it. */
struct ext_leader_call_server {
    raft_id id;    /* the leader, this node's id when it leads; 0: none */
    unsigned wire; /* the wire version it takes (raft_uv_node_peer_wire;
                      for this node's own log, wire_gate_log_wire;
                      EXT_LEADER_CALL_WIRE_ANY: no frame goes; 0: not
                      known) */
};

/* The wire of a server a call reaches with no frame (this node's own
 * core, when it leads): any call can go. */
#define EXT_LEADER_CALL_WIRE_ANY UINT_MAX

/* One call to the leader. Owned by its caller (on its stack, or in a
 * slot the caller holds); the owner links it into its table while it
 * waits (leader_call_open). Invariant: every field is read and written
 * under the owner's mutex (the one leader_call_wait is given), and
 * nothing touches it after the caller closed it. The owner reads the
 * fields marked (owner) directly, as the call stands; only this module's
 * functions change any field: the state machine's transitions (take_due,
 * unsend, requeue, taken, finish, ...) are leader_call.c's. */
struct ext_leader_call {
    uint64_t id[2];               /* request id: unique among its owner's
                                     calls, what answers carry (owner) */
    int state;                    /* enum ext_leader_call_state (owner) */
    bool left_node;               /* was ever sent or stepped: its outcome
                                     is unknown unless answered (sticky;
                                     owner) */
    bool left_before;             /* left_node before its latest send */
    bool shutdown;                /* ended by leader_call_shutdown */
    bool expired;                 /* ended by leader_call_expire */
    unsigned attempts;            /* times sent or stepped (owner) */
    uint64_t sent_at;             /* loop clock of its latest send, ms */
    raft_id sent_to;              /* the server it was last sent to, 0:
                                     never sent (owner) */
    unsigned wire_needed;         /* the lowest wire version the server
                                     it goes to must take, 0: any */
    unsigned poll_ms;             /* the wait's slice while a probe is
                                     asked */
    struct timespec deadline;     /* CLOCK_MONOTONIC */
    pthread_cond_t cond;          /* signalled when it ends (CLOCK_MONOTONIC) */
    void *item;                   /* the owner's record that holds it,
                                     what the table's lookups return
                                     (owner) */
    struct ext_leader_call *next; /* in its owner's table, newest first */
    struct ext_leader_call *prev;
};

/* The calls one owner has linked, found by request id: a list through
 * the calls themselves (nothing allocated). Zeroed: empty. Invariant:
 * read and written under the owner's mutex; a call is linked from
 * leader_call_open until leader_call_close. */
struct ext_leader_call_table {
    struct ext_leader_call *head; /* the newest call, or NULL */
    unsigned n;                   /* calls linked */
};

/* leader_call_deadline returns the CLOCK_MONOTONIC time @ms from now.
 * Any thread. */
struct timespec leader_call_deadline(unsigned ms);

/* ---- The caller's side: any thread, under the owner's mutex ------------ */

/* leader_call_open makes @call a QUEUED call of request id @id (copied;
 * NULL: none, for an owner that finds its calls otherwise) that expires
 * @timeout_ms from now, whose wait asks its probe every @poll_ms (0:
 * EXT_EXEC_POLL_MS), and links it into @t (as its newest) for the owner's
 * record @item (what leader_call_find and the walks return). Release it
 * with leader_call_close. Errors: RAFT_NOMEM (its condition variable;
 * nothing linked then). */
int leader_call_open(struct ext_leader_call_table *t,
                     struct ext_leader_call *call, void *item,
                     const uint64_t id[2], unsigned timeout_ms,
                     unsigned poll_ms);

/* leader_call_need_wire says that @call, open, can go only to a server
 * that takes wire version @wire or later (0: any, as opened): a frame
 * type's raft_frame_type_wire_min, or EXT_WIRE_GATE_VERSION for a request
 * of format 3. leader_call_take_due holds to it. */
void leader_call_need_wire(struct ext_leader_call *call, unsigned wire);

/* leader_call_close takes @call out of @t, into which leader_call_open
 * linked it, and releases what leader_call_open took. */
void leader_call_close(struct ext_leader_call_table *t,
                       struct ext_leader_call *call);

/* leader_call_wait waits, with @mu (the owner's mutex, held on entry and
 * on return) released meanwhile, until @call is DONE, its deadline
 * passes, @probe (may be NULL) says the caller was
 * interrupted (asked without @mu) or the owner shut it down. Returns
 * how it ended (enum ext_leader_call_end): the state then tells the
 * owner what to answer (INTERRUPTED, EXPIRED and SHUTDOWN leave it as
 * it was, never DONE: a call DONE returns EXT_CALL_ANSWERED, also when
 * its owner shut it down after its result was set). Any thread but the
 * loop's. */
int leader_call_wait(struct ext_leader_call *call, pthread_mutex_t *mu,
                     const struct ext_exec_probe *probe);

/* leader_call_poll waits until @ready(@data) holds, the CLOCK_MONOTONIC
 * time @deadline (leader_call_deadline) passes or @probe (may be NULL)
 * says the caller was interrupted, asking @ready, then @probe, then the
 * clock, every @poll_ms (0: EXT_EXEC_POLL_MS), without any lock: the
 * wait for what no loop signals (an index applied, a repair installed),
 * with the same ends as leader_call_wait's. Returns EXT_CALL_ANSWERED,
 * EXT_CALL_EXPIRED or EXT_CALL_INTERRUPTED. Any thread but the loop's. */
int leader_call_poll(const struct timespec *deadline, unsigned poll_ms,
                     const struct ext_exec_probe *probe,
                     bool (*ready)(void *data), void *data);

/* ---- The owner's table: any thread, under the owner's mutex ----------- */

/* leader_call_find returns the item of the call of request id @id linked
 * into @t, or NULL (none: its caller gave up, or the answer is a stale
 * one). */
void *leader_call_find(const struct ext_leader_call_table *t,
                       const uint64_t id[2]);

/* leader_call_next returns the item of the call linked into @t before
 * @after (NULL: the newest), or NULL after the oldest: the owner's walk
 * over every call, newest first. */
void *leader_call_next(const struct ext_leader_call_table *t,
                       const struct ext_leader_call *after);

/* leader_call_count returns how many calls are linked into @t. */
unsigned leader_call_count(const struct ext_leader_call_table *t);

/* A hold on a call that would be due: @hold(@item, @data) returns true
 * to keep the call of @item back this time (not seen by the loop yet,
 * its frame still being written, ...). Under the owner's mutex; it may
 * change the call (leader_call_restart_clock). */
typedef bool (*ext_leader_call_hold_cb)(void *item, void *data);

/* leader_call_take_due returns the item of the next call of @t after
 * @after's (NULL: from the newest) that is due to go to server @to (the
 * leader, this node's id when it leads, and the wire version it takes)
 * at loop clock @now (ms) under @policy, marked SENT to @to at @now: it
 * left this node (left_before keeps whether it had before); NULL once no
 * call is left. Due: a QUEUED call; a SENT one when @policy follows the
 * leader and @to is not the server it went to, or when it went
 * @policy->retry_ms ago or longer; a TAKEN or DONE one never. @hold (may
 * be NULL) is asked first of every QUEUED or SENT call.
 * The wire gate, for a due call that needs a wire version
 * (leader_call_need_wire): while @to's is not known (0) and @policy
 * waits for it, the call is held back, QUEUED; while @to's is older, the
 * call is refused: returned QUEUED, not sent (left_node as it was), with
 * @out_refused set, for its owner to answer (without @out_refused, NULL,
 * it is held back instead). @out_refused, when given, is cleared for a
 * call that goes. The owner checks that a leader is known, and takes
 * back a send that does not happen with leader_call_unsend. */
void *leader_call_take_due(struct ext_leader_call_table *t,
                           const struct ext_leader_call *after,
                           const struct ext_leader_call_policy *policy,
                           const struct ext_leader_call_server *to,
                           uint64_t now, ext_leader_call_hold_cb hold,
                           void *data, bool *out_refused);

/* ---- The owner's side ---------------------------------------------------
 * Each function below takes a call its owner links, and is called on any
 * thread (the loop's, the apply thread's, the caller's) with the owner's
 * mutex held; none fails. */

/* leader_call_unsend takes back the latest send of @call (its
 * leader_call_take_due), which did not happen (the frame was not
 * written, the proposal failed, the leader did not take it): QUEUED,
 * and left_node as it was before that send. Never for a call the wire
 * gate refused: that take sent nothing, so there is nothing to take
 * back (it would lose a left_node of an earlier send). */
void leader_call_unsend(struct ext_leader_call *call);

/* leader_call_refused takes back what the latest send of @call, SENT,
 * told: the leader answered that it did not take it (it holds new
 * entries back), so left_node is as it was before that send; the call
 * stays SENT and is due again once its policy's retry_ms passed since
 * that send, not at once (no frame ping-pong while the leader holds). */
void leader_call_refused(struct ext_leader_call *call);

/* leader_call_requeue makes @call QUEUED to be sent again (the leader
 * stepped down, its entry was replaced); left_node stays. */
void leader_call_requeue(struct ext_leader_call *call);

/* leader_call_restart_clock makes the resend clock of @call, SENT, start
 * again at @now (its frame is still being written). */
void leader_call_restart_clock(struct ext_leader_call *call, uint64_t now);

/* leader_call_taken marks @call TAKEN: the leader took it. */
void leader_call_taken(struct ext_leader_call *call);

/* leader_call_finish marks @call DONE (the owner set its result) and
 * wakes its caller. */
void leader_call_finish(struct ext_leader_call *call);

/* leader_call_shutdown ends the wait of @call, not DONE, as
 * EXT_CALL_SHUTDOWN: the owner shuts down. */
void leader_call_shutdown(struct ext_leader_call *call);

/* leader_call_expire ends the wait of @call at once as its deadline
 * would (EXT_CALL_EXPIRED). */
void leader_call_expire(struct ext_leader_call *call);

/* leader_call_extend moves the deadline of @call to @ms from now, when
 * that is later: a call whose answer came needs that long more (a view
 * to publish). */
void leader_call_extend(struct ext_leader_call *call, unsigned ms);

#endif /* EXT_LEADER_CALL_H */
