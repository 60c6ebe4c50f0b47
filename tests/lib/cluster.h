/* A deterministic in-memory cluster for Raft core tests: N cores driven by
 * a virtual clock, a seeded network that can delay, drop, duplicate,
 * reorder and partition messages, and a disk per node that runs the
 * driver's own storage job queue (raft/persist.h: merged writes, held
 * messages, compaction and installs in order, stale writes after an
 * install, the log-full requeue), one job at a time after a delay, on an
 * in-memory log. The harness obeys the driver contract of raft/raft.h
 * (messages of an update that changed the hard state are held until the
 * write that holds it completes) and checks
 * safety after every step: one leader per term, Log Matching on the
 * durable logs, State Machine Safety on what nodes hand out as committed,
 * that no AppendEntries answer acknowledges a non-durable entry,
 * Durability (an entry handed out committed is durable on a majority and
 * no durable write ever replaces it) and Leader Completeness (every new
 * leader, and every leader of the reporting node's term or later, holds
 * every committed entry). Across configurations (membership, n_founders):
 * every new leader is a voter of its configuration and holds granted
 * votes of a majority of its voters (learners' and non-members' votes do
 * not count), and every index a leader commits is durable on a majority
 * of the voters of the configuration it uses. A failed check fails the
 * running cmocka test, printing the seed and a replay command. */

#ifndef TEST_CLUSTER_H
#define TEST_CLUSTER_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "raft/raft.h"

/* The most nodes a cluster may have. */
#define CLUSTER_MAX_NODES 7

/* Parameters of a cluster. Times are virtual milliseconds. */
struct cluster_config {
    unsigned n;                  /* nodes, ids 1..n */
    uint64_t seed;               /* seeds the network, disks and cores */
    unsigned election_timeout;   /* raft_config.election_timeout */
    unsigned heartbeat_interval; /* raft_config.heartbeat_interval */
    unsigned max_inflight_msgs;  /* raft_config.max_inflight_msgs */
    uint64_t max_size_per_msg;   /* raft_config.max_size_per_msg */
    unsigned tick_ms;            /* interval between a node's ticks */
    unsigned net_min;            /* least network delay */
    unsigned net_max;            /* most network delay (reordering) */
    unsigned drop_pct;           /* percent of messages lost */
    unsigned dup_pct;            /* percent of messages duplicated */
    unsigned disk_min;           /* least disk job latency */
    unsigned disk_max;           /* most disk job latency */
    bool disable_pre_vote;       /* raft_config.disable_pre_vote */
    bool disable_check_quorum;   /* raft_config.disable_check_quorum */
    uint64_t max_inflight_bytes; /* raft_config.max_inflight_bytes */
    unsigned compact_every;      /* compact when more applied entries than
                                    this lie past a node's boundary, 0
                                    never */
    unsigned compact_trailing;   /* entries kept behind the applied index */
    unsigned snap_min;           /* least snapshot transfer time */
    unsigned snap_max;           /* most snapshot transfer time */
    unsigned snap_fail_pct;      /* percent of transfers that fail */
    unsigned disk_full_pct;      /* percent of appends with entries that
                                    the disk refuses for a full log
                                    (RAFT_NOSPACE, nothing written): the
                                    write waits for a compaction or
                                    1000 ms */
    unsigned n_founders;         /* 0: nodes 1..n are the static voters
                                    (raft_config.voters); else nodes
                                    1..n_founders bootstrap the cluster
                                    (entry 1, RAFT_ENTRY_CONFIG) and the
                                    others start empty, to join by
                                    cluster_change; snapshots carry the
                                    configuration of their index */
};

/* Counters of what the harness did and saw. */
struct cluster_stats {
    uint64_t n_compactions;      /* COMPACT events stepped */
    uint64_t n_snapshots_asked;  /* ids in update.snapshot_to */
    uint64_t n_snapshots_failed; /* SNAPSHOT_FAILED events stepped */
    uint64_t n_installs;         /* snapshots installed (log reset) */
    uint64_t n_deferred;         /* rejections a leader set aside until
                                    their predecessors were accounted */
    uint64_t n_dropped_results;  /* results dropped by
                                    cluster_drop_results */
    uint64_t n_writes;           /* storage writes done (merged updates:
                                    one each) */
    uint64_t n_log_full;         /* appends refused for a full log */
    uint64_t n_changes;          /* configuration changes appended */
    uint64_t n_transfers;        /* leadership transfers started */
};

struct cluster; /* opaque */

/* cluster_config_default fills @cfg for @n nodes and @seed: election 100,
 * heartbeat 20, tick 5, network 1..5, disk 1..3, no faults, no
 * compaction (snapshot transfers 5..30 ms, none failing, when there is). */
void cluster_config_default(struct cluster_config *cfg, unsigned n,
                            uint64_t seed);

/* cluster_new starts @cfg->n fresh nodes at time 0 (fails the test on
 * error). Free with cluster_free. */
struct cluster *cluster_new(const struct cluster_config *cfg);

/* cluster_free closes every core and frees everything. */
void cluster_free(struct cluster *c);

/* cluster_n_nodes returns the number of nodes (ids 1..n). */
unsigned cluster_n_nodes(const struct cluster *c);

/* cluster_now returns the virtual time, ms. */
uint64_t cluster_now(const struct cluster *c);

/* cluster_step processes the next event (a disk completion, a message
 * delivery or a tick), advancing the clock to it. */
void cluster_step(struct cluster *c);

/* A runtime layered over the cores, run after every step. */
typedef void (*cluster_step_hook_cb)(struct cluster *c, void *arg);

/* cluster_set_step_hook makes cluster_step (and so cluster_run and
 * cluster_run_until) call @fn(@c, @arg) after each event it processes:
 * where a runtime above the cores (the simulation's write leases: their
 * loops, application frames, holders and checks) runs, as a driver's
 * loop runs its runtime after each step of its core. @fn may propose,
 * crash or restart nodes, send application frames, but not step the
 * cluster. NULL removes it. */
void cluster_set_step_hook(struct cluster *c, cluster_step_hook_cb fn,
                           void *arg);

/* cluster_run processes every event up to now + @ms. */
void cluster_run(struct cluster *c, uint64_t ms);

/* cluster_run_until steps until @pred returns true (then returns true) or
 * @ms passed (then returns false). */
bool cluster_run_until(struct cluster *c, uint64_t ms,
                       bool (*pred)(struct cluster *c, void *arg), void *arg);

/* cluster_raft returns node @id's core, NULL while it is down. */
struct raft *cluster_raft(struct cluster *c, raft_id id);

/* cluster_leader returns the live leader of the highest term, 0 if none. */
raft_id cluster_leader(const struct cluster *c);

/* cluster_propose steps a PROPOSE of a copy of @len bytes at @data on
 * node @id and returns raft_step's result (RAFT_NOTLEADER, ...). */
int cluster_propose(struct cluster *c, raft_id id, const void *data,
                    size_t len);

/* cluster_change steps a RAFT_EVENT_CHANGE of @kind for server @target
 * (@role for an ADD, @address for ADD and UPDATE_ADDRESS) on node @id
 * and returns raft_step's result. */
int cluster_change(struct cluster *c, raft_id id, uint8_t kind, raft_id target,
                   uint8_t role, const char *address);

/* cluster_transfer steps a RAFT_EVENT_TRANSFER to @target (0: the most
 * caught-up voter) on node @id and returns raft_step's result. */
int cluster_transfer(struct cluster *c, raft_id id, raft_id target);

/* cluster_read_index steps a RAFT_EVENT_READ_INDEX of @tag (ReadIndex)
 * on node @id and returns raft_step's result. The harness remembers the
 * highest index handed out committed anywhere before the step (the
 * writes acknowledged before the read began) and fails the run when the
 * read comes back ready at a lower index: a stale read. */
int cluster_read_index(struct cluster *c, raft_id id, uint64_t tag);

/* cluster_read_result tells whether read @tag of node @id came back, and
 * then writes its status and read index. */
bool cluster_read_result(const struct cluster *c, raft_id id, uint64_t tag,
                         int *out_status, raft_index *out_index);

/* cluster_n_reads_ready counts the reads that came back ready. */
unsigned cluster_n_reads_ready(const struct cluster *c);

/* cluster_app_send puts a copy of application frame @data (@len bytes;
 * a runtime's frame, e.g. a write lease's, which the cores never see)
 * from node @from to node @to on the wire, under the rules of the core's
 * messages: links checked when sent and when delivered, loss,
 * duplication, delay and reordering. Delivered frames wait for
 * cluster_app_next; one for a node down at delivery is lost. */
void cluster_app_send(struct cluster *c, raft_id from, raft_id to,
                      const void *data, size_t len);

/* cluster_app_next hands out the oldest application frame delivered and
 * not handed out yet: its sender, receiver and bytes (*@out_data, which
 * the caller frees, *@out_len bytes). Returns false when there is none.
 * Call it after each cluster_step, until false. */
bool cluster_app_next(struct cluster *c, raft_id *out_from, raft_id *out_to,
                      void **out_data, size_t *out_len);

/* cluster_is_member tells whether node @id is a member (voter or
 * learner) of the configuration in force on live node @of. */
bool cluster_is_member(struct cluster *c, raft_id of, raft_id id);

/* cluster_crash stops node @id: its core is closed and its storage jobs
 * that were not complete are lost, with the messages they held. */
void cluster_crash(struct cluster *c, raft_id id);

/* cluster_restart rebuilds node @id's core with raft_new from its durable
 * log and hard state; its state machine (applied entries) survives. */
void cluster_restart(struct cluster *c, raft_id id);

/* cluster_alive tells whether node @id is up. */
bool cluster_alive(const struct cluster *c, raft_id id);

/* cluster_set_link lets messages from @from to @to through or not (checked
 * when sent and when delivered). */
void cluster_set_link(struct cluster *c, raft_id from, raft_id to, bool up);

/* cluster_set_link_delay makes every message put on the wire from @from
 * to @to from now on take @ms more than the drawn network delay (0: none),
 * a link slow one way: the messages already on the wire keep their time.
 * cluster_heal sets every link's back to 0. The test's thread. */
void cluster_set_link_delay(struct cluster *c, raft_id from, raft_id to,
                            unsigned ms);

/* cluster_isolate cuts (or, with @up, restores) every link of node @id. */
void cluster_isolate(struct cluster *c, raft_id id, bool up);

/* cluster_heal restores every link (and its delay) and removes loss,
 * duplication and full-log refusals. */
void cluster_heal(struct cluster *c);

/* cluster_set_faults changes the network's loss, duplication and delay. */
void cluster_set_faults(struct cluster *c, unsigned drop_pct, unsigned dup_pct,
                        unsigned net_min, unsigned net_max);

/* cluster_freeze stops (or resumes) node @id's ticks: a frozen node never
 * times out, but still answers messages. */
void cluster_freeze(struct cluster *c, raft_id id, bool frozen);

/* cluster_n_applied returns how many entries node @id handed out as
 * committed (its state machine). */
unsigned cluster_n_applied(const struct cluster *c, raft_id id);

/* cluster_applied returns the @i-th (0-based, index i+1) entry node @id
 * applied. */
const struct raft_entry *cluster_applied(const struct cluster *c, raft_id id,
                                         unsigned i);

/* cluster_has_applied tells whether node @id applied a NORMAL entry whose
 * payload is @len bytes at @data. */
bool cluster_has_applied(const struct cluster *c, raft_id id, const void *data,
                         size_t len);

/* cluster_durable_last returns the last index of node @id's durable log. */
raft_index cluster_durable_last(const struct cluster *c, raft_id id);

/* cluster_durable_first returns the first index of node @id's durable
 * log (its snapshot boundary + 1). */
raft_index cluster_durable_first(const struct cluster *c, raft_id id);

/* cluster_drop_results drops every @every-th AppendEntries result node
 * @from puts on the wire from now on (0: none). */
void cluster_drop_results(struct cluster *c, raft_id from, unsigned every);

/* cluster_set_snapshot_failures sets the percent of snapshot transfers
 * that fail from now on. */
void cluster_set_snapshot_failures(struct cluster *c, unsigned pct);

/* cluster_stats returns the harness's counters. */
struct cluster_stats cluster_stats(const struct cluster *c);

/* cluster_durable_term returns the term of durable entry @index of node
 * @id, 0 when there is none. */
raft_term cluster_durable_term(const struct cluster *c, raft_id id,
                               raft_index index);

/* cluster_n_truncations returns how many times node @id's durable log had
 * a suffix deleted by a write. */
unsigned cluster_n_truncations(const struct cluster *c, raft_id id);

/* cluster_fail fails the running test with a printf-style message that
 * starts with the cluster's seed and ends with the replay command set by
 * cluster_set_replay. With a jump buffer set by cluster_set_fail_jump it
 * longjmps there instead (the cluster may then only be leaked). */
_Noreturn void cluster_fail(const struct cluster *c, const char *fmt, ...);

/* cluster_set_replay sets the one-line command cluster_fail prints to
 * replay a failure (copied, at most 255 bytes). */
void cluster_set_replay(struct cluster *c, const char *cmd);

/* cluster_set_fail_jump makes cluster_fail print its message and longjmp
 * to @env (with value 1) instead of failing the cmocka test; NULL restores
 * the default. For campaigns that count failures and go on. */
void cluster_set_fail_jump(struct cluster *c, jmp_buf *env);

/* cluster_committed_last returns the highest index any node handed out as
 * committed so far (the harness's record of committed entries). */
raft_index cluster_committed_last(const struct cluster *c);

/* cluster_committed returns the entry first handed out as committed at
 * @index, NULL when none was. */
const struct raft_entry *cluster_committed(const struct cluster *c,
                                           raft_index index);

/* cluster_trace_hash returns a hash of every output of every core so far
 * (hard states, entries to persist, the wire encoding of every message,
 * entries handed out committed), in order: two runs with the same inputs
 * have the same hash exactly when their outputs are byte-identical (up to
 * hash collisions). */
uint64_t cluster_trace_hash(const struct cluster *c);

/* cluster_hard_state returns node @id's durable hard state. */
struct raft_hard_state cluster_hard_state(const struct cluster *c, raft_id id);

/* cluster_log_term returns the term of entry @index in node @id's core
 * (its in-memory log, durable or not), 0 when it has none or is down. */
raft_term cluster_log_term(const struct cluster *c, raft_id id,
                           raft_index index);

/* cluster_n_messages returns how many messages were put on the wire so
 * far (after loss), by type when @type is not 0. */
uint64_t cluster_n_messages(const struct cluster *c, uint8_t type);

/* cluster_n_rejections returns how many refusing AppendEntries answers
 * node @id put on the wire so far. */
uint64_t cluster_n_rejections(const struct cluster *c, raft_id id);

#endif /* TEST_CLUSTER_H */
