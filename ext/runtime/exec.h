/* Writes from callers: the waiting caller (any thread), the bounded
 * submission queue, proposing on the leader or forwarding to it from a
 * follower, and handing each caller the result of its own applied entry.
 * It owns the waiting callers and the request ids, and the words a
 * caller of the node is answered in (ext_exec_result, ext_exec_opts;
 * ext_exec_probe, how a waiting call learns its caller gave up, is
 * leader_call.h's). */

#ifndef EXT_EXEC_H
#define EXT_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../../raft/raft.h"
#include "../../raft/uv_node.h"
#include "../../sql/sql.h"
#include "config.h"
#include "leader_call.h"
#include "propose.h"
#include "request_counts.h"
#include "status.h"

/* How a write ended, as seen by its caller. */
enum ext_exec_kind {
    EXT_EXEC_OK = 0,          /* applied: changes and rowid are set */
    EXT_EXEC_SQL_ERROR = 1,   /* a SQL error: rolled back on every node */
    EXT_EXEC_NOT_APPLIED = 2, /* refused before entering the log */
    EXT_EXEC_UNKNOWN = 3,     /* may be applied on all nodes, or on none */
};

/* Longest client request id, bytes. */
#define EXT_REQUEST_ID_MAX 256

/* Options of one write (ext_node_exec). Zeroed: a plain raft_exec. */
struct ext_exec_opts {
    const char *request_id; /* client-chosen id bytes, or NULL */
    size_t request_id_len;  /* 1..EXT_REQUEST_ID_MAX when set */
    bool want_rows;         /* collect the rows statements return, as JSON */
};

/* The outcome of ext_node_exec. Release it with ext_exec_result_clear
 * (needed only when rows may be set: a want_rows write). */
struct ext_exec_result {
    int kind;                  /* enum ext_exec_kind */
    int sqlite_rc;             /* result code for the caller: RAFTSQL_*
                                  (raftsql.h), SQLite's own for a SQL
                                  error, SQLITE_NOMEM */
    int64_t changes;           /* rows changed, when kind is OK */
    int64_t last_insert_rowid; /* rowid after the request, when OK */
    char errmsg[1024];         /* why, when kind is not OK */
    size_t err_at;             /* for a SQL error of one statement of the
                                  request: 1 + its byte offset in the SQL
                                  text (sql_result.err_at), else 0 */
    char *rows;      /* malloc'd JSON text when want_rows and kind OK, else
                       NULL (shape: sql/rows.c, docs/functions.md "raft_query") */
    bool duplicate;  /* the request id was applied before: this is its
                       first outcome, nothing applied again */
    bool wire_gated; /* refused as request format 3 while a member cannot
                        apply it (ext/runtime/wire_gate.h): it works once every
                        member runs this release */
};

/* ext_exec_result_clear frees what @r holds (rows) and zeroes it. Any
 * thread. */
void ext_exec_result_clear(struct ext_exec_result *r);

/* Most requests queued for the loop thread at once; past it raft_exec
 * answers "busy" at once. */
#define EXT_SUBMIT_QUEUE_MAX 4096

struct ext_exec; /* opaque */

/* exec_new creates the callers' side of node @cfg (the settings it needs
 * are copied): @status tells it whether the log is full, @propose
 * proposes on the leader; both must outlive it. Request ids are (node id,
 * sequence), the sequence starting at @first_seq (random per run, so ids
 * never repeat those of an earlier run, which the state machine would
 * skip as duplicates). Errors: RAFT_NOMEM. Any thread. */
int exec_new(const struct ext_config *cfg, struct ext_status *status,
             struct ext_propose *propose, uint64_t first_seq,
             struct ext_exec **out);

/* exec_attach gives @e the running driver @d, which callers and the apply
 * thread wake. Before any exec_submit; any thread. */
void exec_attach(struct ext_exec *e, struct raft_uv_node *d);

/* exec_free frees @e. NULL is ignored. No caller may wait in it. */
void exec_free(struct ext_exec *e);

/* exec_submit runs one write request through the cluster and waits for
 * its result on this node: what ext_node_exec (node.h) documents. Any
 * thread. */
int exec_submit(struct ext_exec *e, const char *sql, size_t sql_len,
                const struct sql_param *params, unsigned n_params,
                const struct ext_exec_opts *opts,
                const struct ext_exec_probe *probe,
                struct ext_exec_result *out);

/* exec_on_wake takes every queued request and proposes (leader) or
 * forwards (follower) it through driver @d. Loop thread of @d (which may
 * run before exec_attach). */
void exec_on_wake(struct ext_exec *e, struct raft_uv_node *d);

/* exec_hold_back tells @e whether a write lease is in force (lease.h):
 * while @held, a leader proposes none of the waiting requests; they stay
 * queued (never left this node), and one whose exec_timeout_ms passes
 * meanwhile is "not applied", saying it waited behind the lease. A
 * follower forwards as before. Loop thread, before exec_on_wake and
 * exec_on_tick. */
void exec_hold_back(struct ext_exec *e, bool held);

/* exec_on_tick retries requests waiting for a leader and re-forwards those
 * whose answer is overdue, through driver @d. Loop thread of @d. */
void exec_on_tick(struct ext_exec *e, struct raft_uv_node *d);

/* exec_on_forward_result takes the leader's RAFT_FRAME_FORWARD_RESULT @m
 * for one of this node's requests. Loop thread. */
void exec_on_forward_result(struct ext_exec *e, const struct raft_frame *m);

/* exec_applied hands the results of an applied batch (@n entries and
 * results, as sql_fsm_apply gave them) to the callers waiting here, then
 * re-queues callers whose entry at or below @last was applied with another
 * request (a new leader overwrote it: retried under the same id), waking
 * the loop for them. The apply thread. */
void exec_applied(struct ext_exec *e, const struct sql_fsm_entry *entries,
                  const struct sql_result *results, unsigned n,
                  raft_index last);

/* exec_fail_all refuses new callers and fails every waiting one with
 * @reason (outcome unknown when the request had left this node, else not
 * applied); after it the loop is never woken again. Any thread. */
void exec_fail_all(struct ext_exec *e, const char *reason);

/* exec_fail_waiting fails every waiting caller with @reason as
 * exec_fail_all does, and nothing more: later callers are taken (a
 * diverged replica, whose apply thread holds, tells its waiters at once).
 * Any thread. */
void exec_fail_waiting(struct ext_exec *e, const char *reason);

/* exec_set_removed tells @e whether this node is @removed from the
 * cluster by the committed configuration entry @conf_index
 * (status_removed). While it is, exec_submit refuses at once ("not
 * applied: this node was removed ...", RAFTSQL_REMOVED; for a request
 * with a client id "outcome unknown", RAFTSQL_UNKNOWN), and the waiting
 * callers are failed now: never sent, as new ones; sent, "outcome
 * unknown" (the members decide, this node may never hear), but for those
 * whose entry lies before @conf_index, committed here and applied. Loop
 * thread: at every tick, and after any step of the core that changed
 * whether this node is removed (node.c on_stepped), so also from inside
 * a proposal or a message's step: a caller that steps the core must not
 * hold @e's mutex. */
void exec_set_removed(struct ext_exec *e, bool removed, raft_index conf_index);

/* exec_counts gives the number of requests in the submission queue and
 * of callers waiting. Any thread. */
/* exec_request_counts returns the counters of @e's refused, timed-out and
 * forwarded requests (request_counts.h), which exec_submit and the loop
 * count, and which others may add to (ext_node_exec: a refusal before
 * exec_submit) and read. Valid until exec_free. Any thread. */
struct ext_request_counts *exec_request_counts(struct ext_exec *e);

void exec_counts(struct ext_exec *e, unsigned *out_queue,
                 unsigned *out_waiters);

#endif /* EXT_EXEC_H */
