/* Private state of the node runtime, shared by node.c (lifecycle, loop
 * thread, disk jobs), exec.c (callers and forwarding), applier.c (apply
 * thread) and status.c. See node.h for the threads and the flows. */

#ifndef EXT_NODE_INTERNAL_H
#define EXT_NODE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "../lmdb_log/lmdb_log.h"
#include "../raft/raft.h"
#include "../raft/uv_node.h"
#include "../sql/sql.h"
#include "node.h"

/* Most requests queued for the loop thread at once; past it raft_exec
 * answers "busy" at once. */
#define EXT_SUBMIT_QUEUE_MAX 4096

/* Tick period of the Raft core's clock, ms. */
#define EXT_TICK_MS 10

/* Life cycle of one waiting write, all under node->mu. */
enum ext_waiter_state {
    EXT_W_QUEUED = 1,   /* in the submission queue, not seen by the loop */
    EXT_W_PENDING = 2,  /* seen by the loop, waiting for a known leader;
                           never sent anywhere */
    EXT_W_SENT = 3,     /* forwarded to the leader, no answer yet */
    EXT_W_APPENDED = 4, /* in some leader's log at index/term */
    EXT_W_DONE = 5,     /* applied here (or failed): result is set */
};

/* A caller waiting for its write. Owned by the caller's stack frame; linked
 * into node->waiters while it waits. Invariant: only touched under node->mu,
 * and never after the caller unlinked it. */
struct ext_waiter {
    uint64_t id[2];           /* request id: this node's id, sequence */
    struct raft_buf *payload; /* encoded request (unstamped) */
    int state;                /* enum ext_waiter_state */
    bool left_node;           /* was ever forwarded or proposed */
    raft_index index;         /* log index, when APPENDED */
    raft_term term;           /* log term, when APPENDED */
    uint64_t sent_at;         /* loop clock when last forwarded, ms */
    raft_id sent_to;          /* leader it was last forwarded to */
    pthread_cond_t cond;      /* signalled when state becomes DONE */
    struct ext_exec_result result; /* set when DONE */
    struct ext_waiter *next;  /* node->waiters list */
    struct ext_waiter *prev;
};

/* What raft_status() shows of a peer, refreshed by the loop thread. */
struct ext_peer_status {
    raft_id id;              /* peer id */
    bool connected;          /* outgoing connection established */
    bool has_progress;       /* the fields below are valid (leader only) */
    struct raft_progress_info progress;
};

/* A snapshot of the core's state for readers on other threads. */
struct ext_status {
    int role;                /* enum raft_role */
    raft_term term;
    raft_id leader;
    raft_index commit;
    raft_index first;
    raft_index last;
    raft_index persisted;
    struct ext_peer_status peers[EXT_MAX_NODES];
    unsigned n_peers;
    struct raft_uv_node_stats stats; /* the driver's counters */
    bool log_full;           /* the log refused a write: log_max_mb */
};

/* A follower's request (RAFT_MSG_FORWARD) the leader holds until the
 * loop's next wake, so that every request read in one loop iteration is
 * proposed as one batch (one append, one AppendEntries per follower). */
struct ext_forwarded {
    raft_id from;             /* the follower that sent it */
    uint64_t request_id[2];   /* its id (origin, sequence) */
    struct raft_buf *data;    /* the request (reference) */
};

struct ext_node {
    char path[4096];                 /* database file */
    struct ext_config cfg;           /* configuration (copy) */
    pthread_mutex_t mu;              /* guards the fields marked (mu) */

    /* Loop thread: the Raft driver (raft/uv_node.h) runs the core. */
    struct raft_uv_node *driver;     /* owns the core and the transport */
    const struct raft *core;         /* the core, for its accessors (loop) */
    uint64_t seed_state;             /* PRNG for entry seeds (loop) */
    struct ext_forwarded *fwd;       /* followers' requests to propose at
                                        the next wake, in arrival order
                                        (loop) */
    unsigned n_fwd;                  /* (loop) */
    unsigned cap_fwd;                /* (loop) */
    struct lmdb_log *log;            /* the durable log (driver's writes,
                                        reads at start) */

    /* Apply thread. */
    pthread_t apply_thread;
    pthread_cond_t apply_cond;       /* entries queued or stop (mu) */
    struct sql_fsm *fsm;             /* apply connection (apply thread) */
    struct raft_entry *apply_queue;  /* committed entries, refs (mu) */
    unsigned n_apply_queue;          /* (mu) */
    unsigned cap_apply_queue;        /* (mu) */
    bool apply_stop;                 /* (mu) */
    bool apply_failed;               /* applying stopped on an error (mu) */
    bool apply_busy;                 /* a batch is being applied (mu) */
    bool want_checkpoint;            /* checkpoint now (log full) (mu) */
    bool installing;                 /* a snapshot install waits for or
                                        holds the apply connection (mu) */
    pthread_cond_t idle_cond;        /* apply_busy became false (mu) */
    atomic_uint_least64_t applied;   /* last applied index */
    atomic_uint_least64_t durable;   /* applied index durable in the
                                        database file (sql_fsm_durable) */
    pthread_mutex_t snapshot_mu;     /* one snapshot create or install at
                                        a time */
    char snapshot_dir[4096];         /* <dir>/snapshots */
    int lock_fd;                     /* flock on <dir>/node.lock */

    /* Callers. */
    struct ext_waiter *queue[EXT_SUBMIT_QUEUE_MAX]; /* ring (mu) */
    unsigned queue_head;             /* (mu) */
    unsigned queue_len;              /* (mu) */
    struct ext_waiter *waiters;      /* every waiting caller (mu) */
    unsigned n_waiters;              /* (mu) */
    uint64_t next_seq;               /* request sequence numbers (mu) */
    bool shutdown;                   /* no new callers; wake all (mu) */

    /* Status. */
    struct ext_status status;        /* (mu) */
    char last_error[512];            /* (mu) */
};

/* ---- node.c ---------------------------------------------------------- */

/* node_log prints a line to stderr when @level reaches the node's
 * log_level. Any thread. */
void node_log(struct ext_node *n, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* node_set_error records @msg as the node's last error (shown in status)
 * and logs it. Any thread; takes mu. */
void node_set_error(struct ext_node *n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* node_core returns the Raft core, for its accessors. Loop thread. */
const struct raft *node_core(struct ext_node *n);

/* ---- exec.c ---------------------------------------------------------- */

/* exec_on_wake proposes the followers' requests held since the last
 * wake, then takes every queued request and proposes or forwards it.
 * Loop thread. */
void exec_on_wake(struct ext_node *n);

/* exec_on_tick retries requests waiting for a leader and re-forwards those
 * whose answer is overdue. Loop thread. */
void exec_on_tick(struct ext_node *n);

/* exec_on_forward handles a RAFT_MSG_FORWARD (as leader: held for the
 * next wake, then stamped, proposed with every request that arrived
 * meanwhile and answered) or a RAFT_MSG_FORWARD_RESULT (as origin). Loop
 * thread. */
void exec_on_forward(struct ext_node *n, const struct raft_message *m);

/* exec_drop_forwarded releases the followers' requests not yet proposed
 * (at stop, once the loop thread has ended: their senders retry). */
void exec_drop_forwarded(struct ext_node *n);

/* exec_fail_all refuses new callers and fails every waiting one with
 * @reason (at shutdown). Any thread; takes mu. */
void exec_fail_all(struct ext_node *n, const char *reason);

/* exec_deliver hands the result of an applied entry to its waiter, if one
 * waits here, and re-queues waiters whose entry was replaced at @index.
 * Apply thread; caller holds mu. */
void exec_deliver(struct ext_node *n, raft_index index,
                  const struct sql_result *r);

/* exec_requeue_replaced re-queues waiters whose index was applied with
 * another request (their entry was overwritten by a new leader), so they
 * are retried under the same id. Apply thread; caller holds mu. Returns
 * true when something was queued (the loop must be woken). */
bool exec_requeue_replaced(struct ext_node *n, raft_index applied);

/* ---- applier.c ------------------------------------------------------- */

/* applier_main is the apply thread's body (@arg is the node). */
void *applier_main(void *arg);

/* applier_push queues committed @entries (@count long; references taken)
 * for the apply thread. Loop thread. Returns RAFT_NOMEM on failure. */
int applier_push(struct ext_node *n, const struct raft_entry *entries,
                 unsigned count);

/* applier_install installs snapshot file @path (whose last index is
 * @index) into the database while the apply thread is held off, changes
 * the log after it (paper §7: keep the entries after it when the log holds
 * its last entry, else reset) and drops queued entries it covers; a
 * snapshot not above the applied index changes nothing. Errors:
 * RAFT_CORRUPT (refused, nothing changed), RAFT_IOERR (the log could not
 * be changed: restart), RAFT_NOMEM; @errmsg says why. A libuv thread-pool
 * thread. */
int applier_install(struct ext_node *n, const char *path, uint64_t index,
                    char *errmsg, size_t errmsg_len);

/* ---- status.c -------------------------------------------------------- */

/* status_refresh copies the core's state into n->status. Loop thread;
 * takes mu. */
void status_refresh(struct ext_node *n);

#endif /* EXT_NODE_INTERNAL_H */
