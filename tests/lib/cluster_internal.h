/* Private state of the deterministic cluster (cluster.h), shared by its
 * files: cluster.c (the event loop, nodes and their state machines),
 * cluster_net.c (the network and snapshot transfers), cluster_disk.c (the
 * disks, on raft/persist.h), cluster_check.c (the safety checks) and
 * cluster_trace.c (the output hash and CLUSTER_TRACE lines). */

#ifndef TEST_CLUSTER_INTERNAL_H
#define TEST_CLUSTER_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "raft/persist.h"
#include "raft/raft.h"
#include "tests/lib/cluster.h"

/* A message on the wire (a deep copy holding its own buf references). */
struct cmsg {
    uint64_t at;           /* delivery time */
    uint64_t seq;          /* insertion order, breaks ties */
    struct raft_message m; /* the message; entries owned by this copy */
    void *app;             /* an application frame (cluster_app_send):
                              its bytes, owned; m has only from and to */
    size_t app_len;        /* their length */
};

/* An application frame delivered, waiting for cluster_app_next. */
struct capp {
    raft_id from; /* sender */
    raft_id to;   /* receiver (up when it was delivered) */
    void *data;   /* the bytes, owned until handed out */
    size_t len;   /* their length */
};

/* A snapshot transfer in progress (the harness plays the drivers). */
struct csnap {
    uint64_t at;            /* completion time */
    raft_id from;           /* leader */
    unsigned from_restarts; /* its instance (a restart abandons it) */
    raft_term term;         /* its term when it asked */
    raft_id to;             /* follower */
};

/* What the harness last saw of one leader's window for one follower. */
struct cwin {
    unsigned restarts; /* leader instance */
    raft_term term;    /* leader term */
    uint64_t epoch;    /* window epoch */
    uint64_t acked;    /* acked_seq in that epoch */
    uint64_t sent;     /* highest seq sent to the follower */
    bool pending;      /* a rejection was set aside */
};

/* One node: a core plus its durable state and its state machine. */
struct cnode {
    raft_id id;                   /* 1..n */
    struct raft *raft;            /* NULL while down */
    bool frozen;                  /* no ticks */
    uint64_t next_tick;           /* time of the next tick */
    unsigned n_restarts;          /* reseeds the core on restart */
    struct raft_hard_state hs;    /* durable hard state */
    struct raft_entry *log;       /* durable log, index base+i+1 at log[i] */
    unsigned n_log;               /* durable entries */
    raft_index base;              /* durable snapshot boundary */
    raft_term base_term;          /* its term */
    unsigned cap_log;             /* allocated */
    unsigned n_truncations;       /* writes that deleted a suffix */
    struct raft_persist disk;     /* its storage job queue */
    struct raft_persist_job *job; /* the job running, NULL when idle */
    uint64_t job_at;              /* its completion time */
    uint64_t retry_at;            /* log full: time of the retry */
    bool install_reset;           /* the last install reset the log */
    struct cluster *c;            /* the cluster (for the storage) */
    struct raft_entry *applied;   /* handed out committed, own references */
    unsigned n_applied;           /* number applied */
    unsigned cap_applied;         /* allocated */
    raft_index commit_checked;    /* leader: commit index whose quorum was
                                     checked (cluster_check_commit) */
};

/* Reads the harness tracks at once (cluster_read_index). */
#define CLUSTER_MAX_READS 256

/* A read stepped with cluster_read_index. */
struct cread {
    raft_id node;     /* where it was registered */
    uint64_t tag;     /* its tag */
    raft_index floor; /* committed_last when it was registered */
    bool done;        /* it came back */
    int status;       /* then: its status */
    raft_index index; /* and read index */
};

/* The cluster. */
struct cluster {
    struct cread reads[CLUSTER_MAX_READS];           /* reads, oldest first */
    unsigned n_reads;                                /* count */
    unsigned n_reads_ready;                          /* came back ready */
    struct cluster_config cfg;                       /* parameters */
    uint64_t rng;                                    /* network and disk PRNG */
    uint64_t now;                                    /* virtual time, ms */
    uint64_t seq;                                    /* message counter */
    struct cnode nodes[CLUSTER_MAX_NODES];           /* the nodes */
    raft_id ids[CLUSTER_MAX_NODES];                  /* voter ids */
    bool link[CLUSTER_MAX_NODES][CLUSTER_MAX_NODES]; /* [from][to] up */
    unsigned link_delay[CLUSTER_MAX_NODES][CLUSTER_MAX_NODES]; /* [from][to]
                                                   ms added to the drawn
                                                   delay */
    struct cmsg *net;                         /* messages in flight */
    unsigned n_net;                           /* count */
    unsigned cap_net;                         /* allocated */
    raft_id *leaders;                         /* leader of each term */
    size_t n_leaders;                         /* terms tracked */
    struct raft_entry *committed;             /* first commit seen per index */
    raft_term *commit_term;                   /* per index: the term of the
                                                node that first handed it
                                                out, at that time (>= the
                                                term it was committed in) */
    size_t n_committed;                       /* indexes tracked */
    raft_index committed_last;                /* highest committed index */
    uint64_t trace;                           /* FNV-1a of every output */
    uint64_t n_sent[8];                       /* messages on the wire, by
                                                type ([0]: all) */
    uint64_t n_rejections[CLUSTER_MAX_NODES]; /* AppendEntries refused,
                                                by sender */
    struct csnap *snaps;                      /* snapshot transfers */
    unsigned n_snaps;                         /* count */
    unsigned cap_snaps;                       /* allocated */
    struct cwin win[CLUSTER_MAX_NODES][CLUSTER_MAX_NODES]; /* [leader]
                                                [follower] windows */
    struct cluster_stats stats;                            /* counters */
    raft_id drop_from;                     /* drop every drop_every-th */
    unsigned drop_every;                   /* AppendEntries result of
                                                drop_from, 0: none */
    uint64_t drop_count;                   /* its results so far */
    char replay[256];                      /* replay command, or "" */
    bool verbose;                          /* CLUSTER_TRACE=1: print
                                                every event */
    jmp_buf *fail_jump;                    /* cluster_fail target */
    struct raft_configuration conf;        /* latest configuration entry
                                       handed out committed (membership) */
    raft_id (*ballots)[CLUSTER_MAX_NODES]; /* [term][voter - 1]: the
                                       candidate it granted a vote */
    size_t n_ballots;                      /* terms tracked */
    struct capp *inbox;                    /* application frames
                                       delivered, oldest first */
    unsigned n_inbox;                      /* count */
    unsigned cap_inbox;                    /* allocated */
    unsigned inbox_head;                   /* next to hand out */
    cluster_step_hook_cb step_hook;        /* run after each step, NULL */
    void *step_arg;                        /* its argument */
};

/* ---- cluster.c: the loop, nodes and their state machines ------------ */

/* cluster_alloc is realloc(@p, @size) that fails the test when out of
 * memory. */
void *cluster_alloc(const struct cluster *c, void *p, size_t size);

/* cluster_random draws a number in [@lo, @hi] from the cluster's PRNG (the
 * network, the disks and the snapshot transfers share it). */
uint64_t cluster_random(struct cluster *c, unsigned lo, unsigned hi);

/* cluster_node returns node @id (1..n), failing the test for another. */
struct cnode *cluster_node(const struct cluster *c, raft_id id);

/* cluster_applied_configuration writes to @out the configuration of node
 * @n's state machine at @index (its latest applied configuration entry at
 * or below it; empty when none): what a snapshot through @index
 * carries. */
void cluster_applied_configuration(const struct cnode *n, raft_index index,
                                   struct raft_configuration *out);

/* cluster_step_node steps event @e on live node @n (a refused event fails
 * the test), carries out the update as a driver would, runs the checks
 * of every step and compacts when the node handed out entries. */
void cluster_step_node(struct cluster *c, struct cnode *n,
                       const struct raft_event *e);

/* ---- cluster_net.c: the network and snapshot transfers --------------- */

/* cluster_net_send checks that what @m depends on is durable
 * (cluster_check_send), then puts it on the wire subject to links, loss
 * and duplication. */
void cluster_net_send(struct cluster *c, struct cnode *n,
                      const struct raft_message *m);

/* cluster_net_deliver takes message @slot off the wire and steps it on its
 * receiver when that is up and the link lets it through. */
void cluster_net_deliver(struct cluster *c, unsigned slot);

/* cluster_net_snapshot starts a transfer of leader @n's state to @to
 * (an id of update.snapshot_to) of snap_min..snap_max ms. */
void cluster_net_snapshot(struct cluster *c, const struct cnode *n, raft_id to);

/* cluster_net_snapshot_done ends transfer @slot: abandoned when the leader
 * instance is gone; failed (SNAPSHOT_FAILED on the leader) when the
 * follower is down, a link is cut, or by chance (snap_fail_pct);
 * installed otherwise, with the leader's applied state of now. */
void cluster_net_snapshot_done(struct cluster *c, unsigned slot);

/* cluster_net_free frees the messages on the wire and the transfers. */
void cluster_net_free(struct cluster *c);

/* ---- cluster_disk.c: the disks --------------------------------------- */

/* cluster_disk_last returns the last index of @n's durable log. */
raft_index cluster_disk_last(const struct cnode *n);

/* cluster_disk_at returns @n's durable entry @index, NULL when it has none
 * (compacted, or past the end). */
const struct raft_entry *cluster_disk_at(const struct cnode *n,
                                         raft_index index);

/* cluster_disk_term returns the term of @n's durable entry @index, the
 * boundary's term at the boundary, 0 otherwise. */
raft_term cluster_disk_term(const struct cnode *n, raft_index index);

/* cluster_disk_update merges the durable work of node @n's update @u into
 * its storage job queue, and sends its messages, unless the hard state
 * changed: then they are held until the job is durable (driver rule 1). */
void cluster_disk_update(struct cluster *c, struct cnode *n,
                         const struct raft_update *u);

/* cluster_disk_next gives the time of node @n's next disk event in *@at:
 * the completion of its running job, or the retry of one refused for a
 * full log; false when there is none. */
bool cluster_disk_next(const struct cnode *n, uint64_t *at);

/* cluster_disk_complete completes node @n's next disk event: runs its job
 * on the in-memory storage and carries out the result as the driver
 * does (or retries a refused job); then starts the next job. */
void cluster_disk_complete(struct cluster *c, struct cnode *n);

/* cluster_disk_compact plays the driver's periodic compaction: once more
 * than compact_every applied entries lie past @n's boundary, it queues
 * the compaction of the durable log through (applied - compact_trailing,
 * at most the persisted index), unless one is queued already; COMPACT is
 * stepped once it is done. */
void cluster_disk_compact(struct cluster *c, struct cnode *n);

/* cluster_disk_install queues, on follower @f's disk, the install of
 * leader @l's snapshot (its state machine through @index, whose entry has
 * @last_term; @l asked in @term), alone in its job. When it runs, @l's
 * state machine through @index replaces @f's, unless @f's is at or past
 * @index already, the durable log is changed by paper §7, and
 * SNAPSHOT_INSTALLED is stepped. */
void cluster_disk_install(struct cluster *c, struct cnode *f,
                          const struct cnode *l, raft_term term,
                          raft_index index, raft_term last_term);

/* cluster_disk_stop drops node @n's queued and running jobs, with the
 * messages they held (a crash: what was not durable is lost). */
void cluster_disk_stop(struct cnode *n);

/* cluster_disk_free frees node @n's disk, durable state included. */
void cluster_disk_free(struct cnode *n);

/* ---- cluster_check.c: the safety checks ------------------------------ */

/* cluster_check_step runs the checks of every step: election safety (and
 * leader completeness of a new leader) and the in-order windows. */
void cluster_check_step(struct cluster *c);

/* cluster_check_update checks node @n's update @u: increasing seqs of its
 * AppendEntries, and no acknowledgement of a non-durable entry. */
void cluster_check_update(struct cluster *c, const struct cnode *n,
                          const struct raft_update *u);

/* cluster_check_send checks, as node @n sends @m, that what @m relies on
 * is durable (driver rule 1): its term, a granted vote, a vote for itself;
 * a pre-vote asks for exactly the durable term + 1. */
void cluster_check_send(struct cluster *c, const struct cnode *n,
                        const struct raft_message *m);

/* cluster_check_apply checks that node @n hands out @e in order, durable,
 * equal to what any node handed out at that index (State Machine Safety,
 * paper §5.4.3), durable on a majority and held by the current leaders
 * when first handed out (Leader Completeness); then records it and
 * applies it to @n's state machine. */
void cluster_check_apply(struct cluster *c, struct cnode *n,
                         const struct raft_entry *e);

/* cluster_check_log_matching: paper §5.3 Log Matching on durable logs. If
 * two logs hold an entry with the same index and term, they are identical
 * up to it. Checked between @n and every other node. */
void cluster_check_log_matching(struct cluster *c, const struct cnode *n);

/* cluster_check_write: Durability. A write of @entries (@cnt) deletes
 * @n's durable entries from the first one's index on and writes its own:
 * a durable copy of a committed entry may only be rewritten with itself,
 * unless the core no longer counts it as persisted (it dropped the entry,
 * and the write doing so waited in the queue), and then the entry stays
 * durable on a majority. */
void cluster_check_write(struct cluster *c, const struct cnode *n,
                         const struct raft_entry *entries, unsigned cnt);

/* cluster_check_install checks the install of leader @l's snapshot on
 * @f: what @f applied agrees with @l's state (State Machine Safety). */
void cluster_check_install(struct cluster *c, const struct cnode *f,
                           const struct cnode *l);

/* cluster_check_reset checks that a reset of @f's durable log after a
 * snapshot through @index deletes no durable copy of a committed entry
 * past the snapshot (Durability). */
void cluster_check_reset(struct cluster *c, const struct cnode *f,
                         raft_index index);

/* cluster_check_commit checks, after a step of node @n, that an index it
 * committed as leader is durable on a majority of the voters of its
 * configuration (learners and non-members do not count). */
void cluster_check_commit(struct cluster *c, struct cnode *n);

/* cluster_check_free frees the checks' records. */
void cluster_check_free(struct cluster *c);

/* ---- cluster_trace.c: tracing ---------------------------------------- */

/* cluster_trace_update folds node @id's update @u into the output hash;
 * messages in their wire encoding, so the hash covers every byte a driver
 * sends. */
void cluster_trace_update(struct cluster *c, raft_id id,
                          const struct raft_update *u);

/* cluster_trace_message prints a delivered message (CLUSTER_TRACE). */
void cluster_trace_message(const struct cluster *c,
                           const struct raft_message *m);

#endif /* TEST_CLUSTER_INTERNAL_H */
