/* The node runtime's composition root (node.h): start and stop. It opens
 * the state machine (sql/) and the log (store.c), builds the Raft core from
 * what they hold, starts the apply thread (applier.c) and hands the core to
 * the driver (raft/uv_node.h), which runs it on its loop thread; the
 * driver's callbacks are wired here to the callers (exec.c), the leader's
 * forwarding (forward.c), the compaction policy (store.c), the status
 * (status.c) and, at each tick, the evidence of a divergence to its judge
 * (divergence_judge.c), whose verdicts the applier owns. Each of those
 * owns its own state. */

#include <inttypes.h>
#include <sqlite3ext.h> /* result codes only */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "../../raft/address.h"
#include "../../raft/message.h"
#include "../../raft/uv_tls.h"
#include "../raftsql.h"
#include "applier.h"
#include "attach_sock.h"
#include "barrier.h"
#include "boot.h"
#include "change.h"
#include "cluster_id.h"
#include "divergence.h"
#include "divergence_judge.h"
#include "events.h"
#include "exec.h"
#include "forward.h"
#include "lease.h"
#include "load_status.h"
#include "mem_release.h"
#include "metrics.h"
#include "node.h"
#include "node_log.h"
#include "node_tls.h"
#include "propose.h"
#include "repair.h"
#include "sqlbridge.h"
#include "staleness.h"
#include "status.h"
#include "store.h"
#include "wire_gate.h"

_Static_assert(EXT_CLUSTER_ID_HEX == RAFT_UV_CLUSTER_ID_HEX,
               "one cluster id length");

/* Tick period of the Raft core's clock, ms. */
#define EXT__TICK_MS 10

/* Longest frame accepted from a peer: a full AppendEntries batch of the
 * largest request plus headroom. */
#define EXT__FRAME_HEADROOM (4u * 1024 * 1024)

/* Most payload bytes in one AppendEntries. */
#define EXT__MAX_SIZE_PER_MSG (1u * 1024 * 1024)

/* A diverged replica asks for a snapshot again after this long, ms. */
#define EXT__REPAIR_RETRY_MS 1000

/* At start, at most this many no-ops after the applied index are passed
 * over to find the entry a plain writer's commit may have landed before
 * (one per leader change since the last recorded batch). */
#define EXT__START_NOOPS_MAX 64

/* AppendEntries in flight per follower. */
#define EXT__MAX_INFLIGHT_MSGS 16

struct ext_node {
    struct ext_config cfg;             /* configuration (copy) */
    struct ext_boot boot;              /* the configuration at start */
    struct ext_node_log log;           /* log lines and the last error */
    struct ext_store *store;           /* the log directory and LMDB log */
    struct ext_applier *applier;       /* the apply thread and connection */
    struct ext_status *status;         /* what raft_status() shows */
    _Atomic uint64_t known_commit;     /* the cluster's commit index as
                                          the core knows it
                                          (raft_leader_commit), set at
                                          each tick: the pace of large
                                          snapshot writes (pace_commit) */
    struct ext_propose propose;        /* the leader's stamps (loop) */
    struct ext_forward *forward;       /* the leader's side of forwarding */
    struct ext_exec *exec;             /* waiting callers */
    struct ext_lease *lease;           /* the write lease of plain SQL
                                        writes */
    bool held_back;                    /* exec told to hold back (loop
                                          thread only) */
    struct ext_change *change;         /* membership changes and transfers */
    struct ext_cluster_id *cluster;    /* the cluster id */
    struct ext_repair *repair;         /* repairing a diverged replica */
    struct ext_mem_release mem;        /* when the freed heap was last
                                          given back (loop thread) */
    struct ext_divergence_judge judge; /* the evidence of a divergence
                                        judged so far (loop) */
    struct ext_barrier *barrier;       /* raft_barrier's reads */
    struct ext_divergence *divergence; /* the replica checksum's values,
                                        compared with the peers' */
    struct ext_staleness *staleness;   /* the bound on stale reads */
    struct raft_uv_node *driver;       /* owns the core and the transport;
                                        written before its loop starts */
    struct raft_uv_tls *tls;           /* the peers' TLS credentials (the
                                        driver borrows them), NULL for
                                        plain TCP */
    struct ext_load_status *load;      /* the latest raft_load_sql */
    char gate_logged[256];             /* the last reason logged for a
                                        forwarded request of format 3
                                        refused or held (loop) */
    bool told_removed;                 /* the callers and the staleness
                                        state were last told this node
                                        is removed (loop) */
#ifdef RAFTSQL_TEST_FAULTS
    bool test_late_tick;          /* RAFTSQL_TEST_LATE_TICK: the tick never
                            judges staleness, as a loop thread that has
                            not come to its next tick yet (owner) */
    unsigned test_late_status_ms; /* RAFTSQL_TEST_LATE_STATUS_MS: a step
                            that handed out committed entries publishes
                            its status this much later, as a loop thread
                            descheduled between the two (owner) */
    bool test_applied_in_step;    /* on_apply ran in this step (loop) */
#endif
};

static uint64_t pace_commit(void *arg);

/* ---- Driver callbacks (loop thread) ------------------------------------ */

static void on_driver_log(void *data, int level, const char *msg)
{
    struct ext_node *n = data;
    if (level >= RAFT_LOG_ERROR) {
        node_log_error(&n->log, "%s", msg);
    } else {
        node_log_line(&n->log, level, "%s", msg);
    }
}

static void on_apply(void *data, const struct raft_entry *entries, unsigned cnt)
{
    struct ext_node *n = data;
    /* Before the apply thread can apply them and a caller ask: the
     * step's own status_refresh comes after (on_stepped). */
    status_note_commit(n->status, raft_uv_node_core(n->driver));
#ifdef RAFTSQL_TEST_FAULTS
    n->test_applied_in_step = true;
#endif
    if (applier_push(n->applier, entries, cnt) != 0) {
        node_log_error(&n->log, "apply queue: out of memory");
    }
}

/* on_appended: the stamps of the entries the log takes raise the floor
 * of this node's stamps, should it lead (propose.h). */
static void on_appended(void *data, const struct raft_entry *entries,
                        unsigned cnt)
{
    struct ext_node *n = data;
    propose_floor_note(&n->propose, entries, cnt);
}

static void on_forward(void *data, const struct raft_frame *m)
{
    struct ext_node *n = data;
    if (change_codec_is_change(m)) {
        if (m->type == RAFT_FRAME_FORWARD) {
            change_on_request(n->change, n->driver, m);
        } else {
            change_on_result(n->change, n->driver, m);
        }
    } else if (m->type == RAFT_FRAME_FORWARD) {
        forward_on_request(n->forward, n->driver, m);
    } else if (m->type == RAFT_FRAME_FORWARD_RESULT) {
        exec_on_forward_result(n->exec, m);
    } else if (m->type == RAFT_FRAME_CHECKSUM) {
        divergence_on_frame(n->divergence, n->driver, m);
    } else if (barrier_is_frame(m)) {
        barrier_on_frame(n->barrier, n->driver, m);
    } else if (lease_is_frame(m)) {
        lease_on_frame(n->lease, n->driver, m);
    }
}

static void on_read(void *data, const struct raft_read *reads, unsigned cnt)
{
    struct ext_node *n = data;
    barrier_on_reads(n->barrier, n->driver, reads, cnt);
}

/* propose_requests proposes (or forwards) the requests waiting, unless a
 * write lease holds them back: the lease first, so that a changeset its
 * holder queued goes before them (lease.h). */
static void propose_requests(struct ext_node *n, bool tick)
{
    bool held;
    lease_on_loop(n->lease, n->driver);
    held = lease_holds_back(n->lease);
    if (held != n->held_back) {
        /* Only on a change: exec's mutex is the submitters' too. */
        exec_hold_back(n->exec, held);
        n->held_back = held;
    }
    if (!held) {
        forward_propose_held(n->forward, n->driver);
    } else {
        /* Held since before the grant: their followers send them again
         * once the lease ended (entry G + 1 is the changeset's). */
        forward_refuse_held(n->forward, n->driver, RAFT_BUSY);
    }
    if (tick) {
        exec_on_tick(n->exec, n->driver);
    } else {
        exec_on_wake(n->exec, n->driver);
    }
}

static void on_wake(void *data)
{
    struct ext_node *n = data;
    propose_requests(n, false);
    change_on_wake(n->change, n->driver);
    barrier_on_loop(n->barrier, n->driver);
}

/* wall_now_ms returns the wall clock, ms since the epoch (the staleness
 * notice's times). */
static uint64_t wall_now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
}

/* mono_now_ms returns CLOCK_MONOTONIC in ms. */
static uint64_t mono_now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
}

/* judge_staleness publishes whether the node is stale now (a node removed
 * from the cluster is, until added again, and its callers are told:
 * exec.h); when it turned stale it publishes EXT_EVENT_STALE (events.h:
 * the guard expires the prepared statements of every guarded connection
 * of the process, so that they are authorized again, and refused, when
 * next run). */
static void judge_staleness(struct ext_node *n)
{
    const struct raft *core = raft_uv_node_core(n->driver);
    struct ext_staleness_view v = {
        .leading = raft_role(core) == RAFT_LEADER,
        .leader_commit = raft_leader_commit(core),
        .applied = applier_applied(n->applier),
        .commit_current = raft_commit_current(core),
    };
    v.removed = status_removed(n->status, core, &v.removed_at);
    exec_set_removed(n->exec, v.removed, v.removed_at);
    lease_set_removed(n->lease, v.removed, v.removed_at);
    n->told_removed = v.removed;
    v.wall_ms = wall_now_ms();
    v.mono_ms = mono_now_ms();
    v.contact_ms = v.leading ? raft_quorum_contact(core)
                             : raft_leader_commit_contact(core);
    v.leader_quorum_ms = raft_leader_quorum_contact(core);
    v.leader_seen = raft_leader_id(core) != 0;
    if (staleness_on_tick(n->staleness, &v)) {
        ext_events_publish(EXT_EVENT_STALE);
    }
}

static void on_tick(void *data)
{
    struct ext_node *n = data;
    propose_requests(n, true);
    change_on_tick(n->change, n->driver);
    barrier_on_loop(n->barrier, n->driver);
    divergence_on_tick(n->divergence, n->driver);
    store_on_tick(n->store, n->driver);
    mem_release_on_tick(&n->mem, n->driver);
    status_note_failure(n->status, n->driver);
    atomic_store(&n->known_commit,
                 raft_leader_commit(raft_uv_node_core(n->driver)));
    if (!lease_holds_back(n->lease)) {
        /* A cluster's first id entry waits too: under a lease the next
         * entry is its changeset (lease.h). */
        cluster_id_on_tick(n->cluster, n->driver, applier_applied(n->applier));
    }
#ifdef RAFTSQL_TEST_FAULTS
    if (!n->test_late_tick)
#endif
    {
        judge_staleness(n);
    }
    /* Busy connections are retried at every tick (events.h). */
    ext_events_publish(EXT_EVENT_TICK);
    divergence_judge_on_tick(&n->judge, raft_uv_node_core(n->driver),
                             n->divergence, n->applier);
    if (repair_on_tick(n->repair, n->driver, n->applier,
                       EXT__REPAIR_RETRY_MS)) {
        char why[512];
        /* Their entries wait behind the hold, and a repair's snapshot
         * covers them without a result: tell them now. */
        if (repair_refusal(n->repair, n->applier, why, sizeof why)) {
            exec_fail_waiting(n->exec, why);
        }
    }
}

/* on_diverged answers the driver's question from the applier, the owner
 * of the divergence. */
static bool on_diverged(void *data)
{
    struct ext_node *n = data;
    return applier_diverged(n->applier, NULL);
}

static void on_cluster_id(void *data, const uint8_t id[RAFT_UV_CLUSTER_ID_LEN],
                          raft_id from)
{
    struct ext_node *n = data;
    cluster_id_adopted(n->cluster, n->driver, id, from);
}

/* on_stepped runs after each step of the core. A removal, or an
 * addition back, is told to the callers and the staleness state before
 * status_refresh publishes it: whoever sees raft_status() say removed
 * gets RAFTSQL_REMOVED from its next write and SQLITE_AUTH from its next
 * read, never a write that leaves for the leader. */
static void on_stepped(void *data)
{
    struct ext_node *n = data;
    struct ext_status_change c;
    raft_index removed_at;
    bool judged = false;
    lease_on_loop(n->lease, n->driver); /* a commit, a leader change */
    if (status_removed(n->status, raft_uv_node_core(n->driver), &removed_at) !=
        n->told_removed) {
        judge_staleness(n);
        judged = true;
    }
#ifdef RAFTSQL_TEST_FAULTS
    if (n->test_applied_in_step && n->test_late_status_ms > 0) {
        struct timespec late = {
            .tv_sec = n->test_late_status_ms / 1000,
            .tv_nsec = (long)(n->test_late_status_ms % 1000) * 1000000L};
        nanosleep(&late, NULL);
    }
    n->test_applied_in_step = false;
#endif
    if (status_refresh(n->status, raft_uv_node_core(n->driver), n->driver,
                       &c)) {
        char line[160];
        /* A new role, leader or term: the staleness verdict follows at
         * once, not at the next tick (raft_status() showed a leader
         * beside "no leader known" for up to a tick: a new-user trial). */
        if (!judged) {
            judge_staleness(n);
        }
        status_describe_change(&c, line, sizeof line);
        node_log_line(&n->log, RAFT_LOG_INFO, "%s", line);
        if (c.removed) {
            status_describe_removal(true, c.conf_index, line, sizeof line);
            node_log_line(&n->log, RAFT_LOG_WARN, "%s", line);
        }
    }
}

/* on_dial says where the driver dials server @id of a new configuration:
 * its dial= override, else its address in the configuration. */
static bool on_dial(void *data, raft_id id, const char *address,
                    struct raft_uv_peer *out)
{
    struct ext_node *n = data;
    return ext_config_dial(&n->cfg, id, address, out->host, sizeof out->host,
                           &out->port) == 0;
}

/* ---- Forwarding's view of the node (loop thread) ----------------------- */

/* fwd_held_back says whether a write lease holds new entries back: a
 * follower's request is refused then, and sent again (forward.h). */
static bool fwd_held_back(void *data)
{
    struct ext_node *n = data;
    return lease_holds_back(n->lease);
}

/* change_lease_held says whether a write lease holds new entries back:
 * a membership change waits for its end (change.h). */
static bool change_lease_held(void *data)
{
    struct ext_node *n = data;
    return lease_holds_back(n->lease);
}

/* lease_change_waiting says whether a membership change waits for the
 * lease in force: no new lease is granted (lease.h). */
static bool lease_change_waiting(void *data)
{
    struct ext_node *n = data;
    return change_waits_for_lease(n->change);
}

/* fwd_admit_format3 says whether a follower's request of format 3 may be
 * proposed (wire_gate.h); a refusal is logged once per reason. */
static int fwd_admit_format3(void *data)
{
    struct ext_node *n = data;
    char why[256];
    int gate = wire_gate_members(n->driver, n->cfg.id, why, sizeof why);

    if (gate == EXT_WIRE_GATE_OPEN) {
        return 0;
    }
    if (strcmp(why, n->gate_logged) != 0) {
        snprintf(n->gate_logged, sizeof n->gate_logged, "%s", why);
        node_log_line(&n->log, RAFT_LOG_WARN,
                      "a forwarded request of format 3 refused: %s", why);
    }
    return RAFT_FORMAT;
}

/* ---- The apply thread's view of the node ------------------------------- */

static void on_applied(void *data, const struct sql_fsm_entry *entries,
                       const struct sql_result *results, unsigned cnt,
                       raft_index last)
{
    struct ext_node *n = data;
    for (unsigned i = 0; i < cnt; i++) {
        divergence_applied(n->divergence, entries[i].index,
                           results[i].checksum);
    }
    exec_applied(n->exec, entries, results, cnt, last);
}

static void on_cluster_applied(void *data, const uint8_t id[SQL_CLUSTER_ID_LEN])
{
    struct ext_node *n = data;
    cluster_id_applied(n->cluster, id);
}

/* raise_floor raises the floor of this node's stamps to the latest one
 * state machine @fsm applied (propose.h): what a compacted log or a
 * snapshot no longer shows. */
static void raise_floor(struct ext_node *n, const struct sql_fsm *fsm)
{
    int64_t t;
    if (sql_fsm_applied_time(fsm, &t)) {
        propose_floor_raise(&n->propose, t);
    }
}

static void on_installed(void *data, struct sql_fsm *fsm)
{
    struct ext_node *n = data;
    divergence_installed(n->divergence, fsm);
    raise_floor(n, fsm);
}

static bool apply_now(void *data)
{
    struct ext_node *n = data;
    unsigned queue, waiters;
    exec_counts(n->exec, &queue, &waiters);
    return waiters > 0 || status_role(n->status) == RAFT_LEADER;
}

/* ---- Start and stop ----------------------------------------------------- */

/* build_id is this node's build as its peer handshakes carry it: the
 * source id of the SQLite library that counts the work budget's steps, or
 * the environment variable RAFTSQL_TEST_BUILD_ID when set, for tests only
 * (it makes the node look like another SQLite build). */
static const char *build_id(void)
{
    const char *s = getenv("RAFTSQL_TEST_BUILD_ID");
    return s != NULL && s[0] != '\0' ? s : sql_source_id();
}

static uint64_t random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
            (uint64_t)(uintptr_t)&v;
    }
    return v;
}

/* restore_core builds the Raft core from what the log holds (@st), the
 * configuration boot_prepare decided and the state machine's applied
 * index. */
static int restore_core(struct ext_node *n, const struct ext_store_state *st,
                        uint64_t applied, struct raft **out, char *errmsg,
                        size_t errmsg_len)
{
    struct raft_config rc_cfg;
    int rc;

    memset(&rc_cfg, 0, sizeof rc_cfg);
    rc_cfg.id = n->cfg.id;
    /* The log's configuration entries override it (boot.h). */
    rc_cfg.configuration = &n->boot.prefix;
    rc_cfg.election_timeout = n->cfg.election_timeout_ms;
    rc_cfg.heartbeat_interval = n->cfg.heartbeat_ms;
    rc_cfg.max_size_per_msg = EXT__MAX_SIZE_PER_MSG;
    rc_cfg.max_inflight_msgs = EXT__MAX_INFLIGHT_MSGS;
    rc_cfg.seed = random_u64();
#ifdef RAFTSQL_TEST_FAULTS
    /* Test builds only: a leader that hears from no quorum keeps leading
     * (no check-quorum step-down), so that a test holds writes that left
     * the node while no follower answers, however late a loaded machine
     * brings them. */
    rc_cfg.disable_check_quorum =
        getenv("RAFTSQL_TEST_NO_CHECK_QUORUM") != NULL;
#endif
    rc = raft_restore(&rc_cfg, &st->hs, st->snap_index, st->snap_term,
                      st->entries, st->n_entries, applied, out);
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "raft: %s", raft_strerror(rc));
    }
    return rc;
}

/* open_store opens (or creates) the log directory of @n for database
 * @db_path and takes its node.lock: the first thing a start does, so
 * that of two processes starting a node on one file the second stops
 * here, before it opens the database (whose raftsql_* tables a failed
 * first start drops again: sql_fsm_discard_on_close). */
static int open_store(struct ext_node *n, const char *db_path, char *errmsg,
                      size_t errmsg_len)
{
    struct ext_store_config sc = {
        .dir = n->cfg.dir,
        .db_path = db_path,
        .log_max_bytes = n->cfg.log_max_bytes,
        .snapshot_threshold = n->cfg.snapshot_threshold,
        .trailing_entries = n->cfg.trailing_entries,
        .election_timeout_ms = n->cfg.election_timeout_ms,
    };
    return store_open(&sc, &n->log, &n->store, errmsg, errmsg_len);
}

/* load_core builds the core from the log (open_store) and from the state
 * machine @fsm (still the caller's). */
static int load_core(struct ext_node *n, const char *db_path,
                     struct sql_fsm *fsm, struct raft **out, char *errmsg,
                     size_t errmsg_len)
{
    struct ext_store_state st;
    int rc =
        boot_check_log(n->store, fsm, &n->cfg, db_path, errmsg, errmsg_len);
    if (rc == 0) {
        rc = cluster_id_new(n->store, &n->log, &n->cluster);
    }
    if (rc == 0) {
        rc = cluster_id_boot(n->cluster, fsm, errmsg, errmsg_len);
    }
    if (rc != 0) {
        return rc;
    }
    rc = store_load(n->store, sql_fsm_applied(fsm), sql_fsm_applied_term(fsm),
                    &st, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    rc = boot_prepare(n->store, fsm, &n->cfg, &n->log, &st, &n->boot, errmsg,
                      errmsg_len);
    if (rc != 0) {
        store_state_free(&st);
        return rc;
    }
    /* The floor of this node's stamps: the latest its log holds and its
     * database applied (propose.h). */
    propose_floor_note(&n->propose, st.entries, st.n_entries);
    raise_floor(n, fsm);
    rc = restore_core(n, &st, sql_fsm_applied(fsm), out, errmsg, errmsg_len);
    store_state_free(&st);
    return rc;
}

/* start_threads starts the apply thread on @fsm (always taken: closed on
 * failure) and the driver on @core (taken on success only), wiring their
 * callbacks. */
static int start_threads(struct ext_node *n, const char *db_path,
                         struct sql_fsm *fsm, struct raft *core, char *errmsg,
                         size_t errmsg_len)
{
    struct ext_applier_config ac = {
        .follower_apply_ms = n->cfg.follower_apply_ms,
        .snapshot_threshold = n->cfg.snapshot_threshold,
        /* Five election timeouts, at least 2 s: a restarted node hears
         * from its leader, and gets the entries after its log, well
         * within it. */
        .start_next_ms = n->cfg.election_timeout_ms * 5 > 2000
                             ? n->cfg.election_timeout_ms * 5
                             : 2000,
    };
    struct ext_applier_hooks ah = {
        .data = n,
        .applied = on_applied,
        .apply_now = apply_now,
        .cluster_id = on_cluster_applied,
        .installed = on_installed,
    };
    struct raft_uv_peer peers[EXT_MAX_NODES];
    struct raft_uv_node_config dc;
    struct raft_persist_storage storage;
    struct sql_copy_gate gate;
    struct sql_pace pace;
    struct raft_uv_node_callbacks cb = {
        .data = n,
        .apply = on_apply,
        .appended = on_appended,
        .forward = on_forward,
        .read = on_read,
        .wake = on_wake,
        .tick = on_tick,
        .stepped = on_stepped,
        .log = on_driver_log,
        .dial = on_dial,
        .cluster_id = on_cluster_id,
        .diverged = on_diverged,
    };
    struct raft_entry next;
    unsigned n_peers = 0;
    int rc;

    snprintf(ac.mark_path, sizeof ac.mark_path, "%s/diverged", n->cfg.dir);
    snprintf(ac.stopped_path, sizeof ac.stopped_path, "%s/stopped", n->cfg.dir);
    snprintf(ac.db_path, sizeof ac.db_path, "%s", db_path);
    attach_sock_diverged_path(db_path, ac.notice_path, sizeof ac.notice_path);
    attach_sock_settings_path(db_path, ac.settings_path,
                              sizeof ac.settings_path);
    /* The entry a writer's commit may have landed before: the first after
     * the applied index and the no-ops it did not record (a grant's
     * catch-up applies them in memory only). */
    ac.next_index = sql_fsm_applied(fsm) + 1;
    memset(&next, 0, sizeof next); /* written by store_entry on success */
    for (unsigned i = 0; i < EXT__START_NOOPS_MAX; i++) {
        if (store_entry(n->store, ac.next_index, &next) != 0) {
            break;
        }
        if (next.type != RAFT_ENTRY_NOOP) {
            ac.next = &next;
            break;
        }
        raft_buf_unref(next.data);
        memset(&next, 0, sizeof next);
        ac.next_index++;
    }
    rc = applier_start(fsm, &ac, &ah, &n->log, &n->applier);
    raft_buf_unref(next.data);
    if (rc != 0) {
        sql_fsm_discard_on_close(fsm);
        sql_fsm_close(fsm);
        snprintf(errmsg, errmsg_len, "cannot start the apply thread");
        return RAFT_NOMEM;
    }
    /* The other servers of the configuration in force; the driver dials
     * the dial= override, if any. */
    for (unsigned i = 0; i < n->boot.conf.n; i++) {
        const struct raft_server *sv = &n->boot.conf.servers[i];
        struct raft_uv_peer *p = &peers[n_peers];
        if (sv->id == n->cfg.id) {
            continue;
        }
        memset(p, 0, sizeof *p);
        p->id = sv->id;
        raft_uv_peer_set_identity(p, sv->address);
        if (ext_config_dial(&n->cfg, sv->id, sv->address, p->host,
                            sizeof p->host, &p->port) != 0) {
            node_log_line(&n->log, RAFT_LOG_WARN,
                          "server %" PRIu64
                          ": address '%s' is not host:port and no dial= "
                          "names it: not dialled",
                          sv->id, sv->address);
            continue;
        }
        n_peers++;
    }
    memset(&dc, 0, sizeof dc);
    dc.id = n->cfg.id;
    dc.listen_host = n->cfg.listen_host;
    dc.listen_port = n->cfg.listen_port;
    dc.advertise = n->cfg.advertise[0] != '\0' ? n->cfg.advertise : NULL;
    dc.peers = peers;
    dc.n_peers = n_peers;
    dc.max_frame_bytes = n->cfg.max_request_bytes + EXT__FRAME_HEADROOM;
    dc.tick_ms = EXT__TICK_MS;
    dc.snapshot_dir = store_snapshot_dir(n->store);
    dc.snapshot_chunk_bytes = n->cfg.snapshot_chunk_bytes;
    dc.snapshot_rate_bytes = n->cfg.snapshot_rate_bytes;
    dc.build_id = build_id();
    dc.tls = n->tls;
    dc.storage_stall_ms = n->cfg.election_timeout_ms;
    cluster_id_get(n->cluster, dc.cluster_id);
    store_log(n->store, n->applier, &storage.log);
    ext_node_copy_gate(n, &gate);
    applier_set_copy_gate(n->applier, &gate);
    pace.rate = n->cfg.snapshot_rate_bytes;
    pace.commit = pace_commit;
    pace.arg = n;
    applier_set_pace(n->applier, &pace);
    applier_persist_fsm(n->applier, &storage.fsm);
    rc = raft_uv_node_start(core, &dc, &storage, &cb, &n->driver, errmsg,
                            errmsg_len);
    if (rc != 0) {
        /* The file goes back to what it was (store_discard: the log). */
        sql_fsm_discard_on_close(fsm);
        applier_stop(n->applier); /* closes the state machine */
        n->applier = NULL;
        return rc;
    }
    exec_attach(n->exec, n->driver);
    change_set_lease_test(n->change, change_lease_held, n);
    lease_set_change_test(n->lease, lease_change_waiting, n);
    change_attach(n->change, n->driver);
    lease_attach(n->lease, n->driver, n->applier);
    return 0;
}

/* node_free frees what is left of @n (any part may be missing); after a
 * start that @failed, the log directory goes too if that start created it
 * (store_discard). */
static void node_free(struct ext_node *n, bool failed)
{
    exec_free(n->exec);
    lease_free(n->lease);
    change_free(n->change);
    divergence_free(n->divergence);
    staleness_free(n->staleness);
    barrier_free(n->barrier);
    forward_free(n->forward);
    status_free(n->status);
    cluster_id_free(n->cluster);
    repair_free(n->repair);
    load_status_free(n->load);
    if (failed) {
        store_discard(n->store);
    } else {
        store_close(n->store);
    }
    raft_uv_tls_free(n->tls);
    node_log_close(&n->log);
    free(n);
}

/* new_staleness creates the staleness state of @n, serving @db_path;
 * with a bound it publishes EXT_EVENT_STALE, so that the statements
 * connections prepared before are expired (the node is stale until it
 * hears from a leader). */
static int new_staleness(struct ext_node *n, const char *db_path)
{
    char notice[4200], bound[4200];
    attach_sock_stale_path(db_path, notice, sizeof notice);
    attach_sock_bound_path(db_path, bound, sizeof bound);
    if (staleness_new(n->cfg.max_staleness_ms, notice, bound, &n->log,
                      &n->staleness) != 0) {
        return RAFT_NOMEM;
    }
    if (n->cfg.max_staleness_ms > 0) {
        ext_events_publish(EXT_EVENT_STALE);
    }
    return 0;
}

/* judge_removed_at_start tells the callers and the staleness state of @n
 * whether its log, restored into @core, says it was removed from the
 * cluster (status_removed):
 * a node restarted after its removal refuses writes and reads from its
 * first call, before its loop's first tick. The owner, before the loop
 * starts. */
static void judge_removed_at_start(struct ext_node *n, const struct raft *core)
{
    struct ext_staleness_view v = {.contact_ms = UINT64_MAX};

    if (!status_removed(n->status, core, &v.removed_at)) {
        return;
    }
    v.removed = true;
    n->told_removed = true;
    v.wall_ms = wall_now_ms();
    exec_set_removed(n->exec, true, v.removed_at);
    if (staleness_on_tick(n->staleness, &v)) {
        ext_events_publish(EXT_EVENT_STALE);
    }
}

int ext_node_start(const char *db_path, const struct ext_config *cfg,
                   struct ext_node **out, char *errmsg, size_t errmsg_len)
{
    struct ext_node *n = calloc(1, sizeof *n);
    struct ext_forward_ops fo;
    struct sql_fsm *fsm = NULL;
    struct raft *core = NULL;
    int rc;

    if (n == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    n->cfg = *cfg;
#ifdef RAFTSQL_TEST_FAULTS
    n->test_late_tick = getenv("RAFTSQL_TEST_LATE_TICK") != NULL;
    {
        const char *late = getenv("RAFTSQL_TEST_LATE_STATUS_MS");
        n->test_late_status_ms =
            late != NULL ? (unsigned)strtoul(late, NULL, 10) : 0;
    }
#endif
    node_log_init(&n->log, cfg->id, cfg->log_level);
    propose_init(&n->propose, random_u64(), cfg->max_request_steps);
    propose_set_ids(&n->propose, cfg->request_id_window,
                    cfg->request_id_window_ms, cfg->max_result_bytes);
    fo = (struct ext_forward_ops){
        .data = n,
        .admit_format3 = fwd_admit_format3,
        .held_back = fwd_held_back,
    };
    /* Request ids are (node id, sequence): start each run's sequence at a
     * random point so ids never repeat those of an earlier run, below
     * 2^62 so that it never reaches EXT_CHANGE_SEQ_BIT, which marks the
     * ids of membership changes. */
    if (status_new(cfg, build_id(), &n->status) != 0 ||
        forward_new(cfg->id, cfg->max_request_bytes, &n->propose, &fo,
                    &n->forward) != 0 ||
        exec_new(cfg, n->status, &n->propose, random_u64() >> 2, &n->exec) !=
            0 ||
        lease_new(cfg->id, cfg->lease_timeout_ms, cfg->exec_timeout_ms,
                  cfg->max_request_bytes, &n->lease) != 0 ||
        repair_new(cfg->id, cfg->repair_manual, &n->log, &n->repair) != 0 ||
        divergence_new(cfg->id, &n->log, &n->divergence) != 0 ||
        load_status_new(&n->load) != 0 || new_staleness(n, db_path) != 0 ||
        barrier_new(cfg->id, cfg->election_timeout_ms, cfg->exec_timeout_ms,
                    &n->barrier) != 0) {
        snprintf(errmsg, errmsg_len, "out of memory");
        rc = RAFT_NOMEM;
        goto err_free;
    }

    /* The peers' credentials, then the database: bad certificate files
     * or a file that is no replica leave nothing behind. */
    rc = node_tls_load(&n->cfg, &n->log, &n->tls, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_free;
    }
    rc = open_store(n, db_path, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_free;
    }
    rc = sqlbridge_open(db_path, &fsm, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_free;
    }
#ifdef RAFTSQL_TEST_FAULTS
    {
        /* Test builds only: hold the start between the database's open
         * and the rest (another process starting meanwhile). */
        const char *ms = getenv("RAFTSQL_TEST_START_OPEN_DELAY_MS");
        if (ms != NULL) {
            usleep((useconds_t)atoi(ms) * 1000);
        }
    }
#endif
    divergence_start(n->divergence, fsm, n->cfg.checksum);
    rc = load_core(n, db_path, fsm, &core, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_fsm;
    }
    /* After the boot, which clears join= on a node that entered a
     * cluster already. */
    if (change_new(&n->cfg, random_u64() >> 2, &n->change) != 0) {
        raft_close(core);
        snprintf(errmsg, errmsg_len, "out of memory");
        rc = RAFT_NOMEM;
        goto err_fsm;
    }
    {
        char listen[EXT_ADDRESS_MAX + 1], warning[1024];
        /* n->cfg: the boot may have set the advertised address. */
        if (n->cfg.advertise[0] != '\0') {
            snprintf(listen, sizeof listen, "%s", n->cfg.advertise);
        } else {
            ext_node_listen(n, listen, sizeof listen);
        }
        status_set_boot(n->status, n->boot.source == EXT_BOOT_JOIN,
                        n->boot.forced, listen);
        if (status_describe_listen(cfg->id, listen, &n->boot.conf, warning,
                                   sizeof warning)) {
            node_log_line(&n->log, RAFT_LOG_WARN, "%s", warning);
        }
        node_tls_warn_host(n->tls, n->cfg.tls_cert, listen, &n->log);
    }
    status_refresh(n->status, core, NULL, NULL);
    judge_removed_at_start(n, core);
    rc = start_threads(n, db_path, fsm, core, errmsg, errmsg_len);
    if (rc != 0) {
        raft_close(core);
        goto err_free; /* the applier closed the state machine */
    }
    {
        char servers[1024], cluster_id[RAFT_UV_CLUSTER_ID_HEX];
        char listen[EXT_ADDRESS_MAX + 1];
        unsigned wire_lo, wire_hi;
        raft_wire_versions_get(&wire_lo, &wire_hi);
        boot_format_servers(&n->boot.conf, servers, sizeof servers);
        cluster_id_hex(n->cluster, cluster_id);
        ext_config_listen_format(&n->cfg, listen, sizeof listen);
        if (n->cfg.insecure && !ext_config_peers_authenticated(&n->cfg)) {
            node_log_line(&n->log, RAFT_LOG_WARN,
                          "insecure=on: peers do not authenticate each "
                          "other and their traffic is not encrypted: "
                          "anyone who can reach %s can join the cluster, "
                          "vote, and write to the database",
                          listen);
        }
        node_log_line(&n->log, RAFT_LOG_INFO,
                      "started: listen %s, wire versions %u-%u, log %s, "
                      "applied %" PRIu64 ", configuration %s (index %" PRIu64
                      ")%s, cluster id %s",
                      listen, wire_lo, wire_hi, cfg->dir,
                      applier_applied(n->applier), servers, n->boot.conf_index,
                      n->boot.bootstrapped ? ", bootstrapped" : "",
                      cluster_id[0] != '\0' ? cluster_id : "none yet");
    }
    *out = n;
    return 0;

err_fsm:
    sql_fsm_discard_on_close(fsm);
    sql_fsm_close(fsm);
err_free:
    node_free(n, true);
    return rc;
}

/* stop_node is ext_node_stop, and ext_node_discard when @failed. */
static void stop_node(struct ext_node *n, bool failed)
{
    /* No wake of the loop from here on (the apply thread may still
     * deliver). */
    change_shutdown(n->change);
    barrier_shutdown(n->barrier);
    lease_shutdown(n->lease);
    exec_fail_all(n->exec, "the node is shutting down (raft_stop)");

    /* The driver finishes its running log write, joins its loop thread
     * and closes the core; no callback runs after this. */
    raft_uv_node_stop(n->driver);
    n->driver = NULL;
    applier_stop(n->applier);
    node_log_line(&n->log, RAFT_LOG_INFO, "stopped");
    node_free(n, failed);
}

void ext_node_stop(struct ext_node *n)
{
    stop_node(n, false);
}

void ext_node_discard(struct ext_node *n)
{
    stop_node(n, true);
}

int ext_node_exec(struct ext_node *n, const char *sql, size_t sql_len,
                  const struct sql_param *params, unsigned n_params,
                  const struct ext_exec_opts *opts,
                  const struct ext_exec_probe *probe,
                  struct ext_exec_result *out)
{
    char why[sizeof out->errmsg - 32];
    if (repair_refusal(n->repair, n->applier, why, sizeof why)) {
        /* Nothing compounds on a replica that disagrees with the log. */
        memset(out, 0, sizeof *out);
        out->kind = EXT_EXEC_NOT_APPLIED;
        out->sqlite_rc = RAFTSQL_DIVERGED;
        snprintf(out->errmsg, sizeof out->errmsg, "raft_exec: not applied: %s",
                 why);
        request_counts_refused(exec_request_counts(n->exec),
                               EXT_REFUSED_DIVERGED);
        return RAFT_DIVERGED;
    }
    return exec_submit(n->exec, sql, sql_len, params, n_params, opts, probe,
                       out);
}

/* The texts an ext_status_extra points into, on its reader's stack. */
struct extra_text {
    char last_error[512];
    char apply_error[512];
    char tls_expires[32];
    char cluster_id[RAFT_UV_CLUSTER_ID_HEX];
};

/* gather_extra asks each part of @n for what the status adds to the
 * core's state (ext_status_extra), its texts in @t. Any thread. */
static void gather_extra(struct ext_node *n, struct ext_status_extra *x,
                         struct extra_text *t)
{
    x->last_error_age_ms =
        node_log_last_error(&n->log, t->last_error, sizeof t->last_error);
    applier_error(n->applier, t->apply_error, sizeof t->apply_error);
    x->apply_error = t->apply_error;
    exec_counts(n->exec, &x->queue, &x->waiters);
    x->applied = applier_applied(n->applier);
    x->durable = applier_durable(n->applier);
    x->applying = !applier_failed(n->applier);
    x->last_error = t->last_error;
    x->tls = n->tls == NULL ? "off"
             : raft_uv_tls_mode(n->tls) == RAFT_UV_TLS_CERTIFICATES
                 ? "certificates"
                 : "psk";
    t->tls_expires[0] = '\0';
    if (n->tls != NULL) {
        raft_uv_tls_expires(n->tls, t->tls_expires, sizeof t->tls_expires);
    }
    x->tls_cert_expires = t->tls_expires;
    cluster_id_hex(n->cluster, t->cluster_id);
    x->cluster_id = t->cluster_id;
    divergence_status(n->divergence, &x->checksum);
    x->diverged = applier_diverged(n->applier, &x->divergence);
    repair_describe(n->repair, x->repair, sizeof x->repair);
    x->repairs = applier_repairs(n->applier);
    x->has_start_scan = applier_start_scan(n->applier, &x->start_scan);
    x->has_load = load_status_get(n->load, &x->load);
    staleness_get(n->staleness, &x->staleness);
    lease_view(n->lease, &x->lease);
    x->changes_waiting = change_waiting_count(n->change);
    applier_metrics(n->applier, &x->apply);
    request_counts_read(exec_request_counts(n->exec), &x->requests);
}

char *ext_node_status(struct ext_node *n)
{
    struct extra_text t;
    struct ext_status_extra x;

    gather_extra(n, &x, &t);
    return status_json(n->status, &x);
}

char *ext_node_metrics(struct ext_node *n)
{
    struct extra_text t;
    struct ext_status_extra x;
    struct ext_status_view v;

    gather_extra(n, &x, &t);
    status_view(n->status, &v);
    return metrics_text(&v, &x);
}

struct ext_load_status *ext_node_load_status(struct ext_node *n)
{
    return n->load;
}

uint64_t ext_node_max_request_bytes(const struct ext_node *n)
{
    return n->cfg.max_request_bytes;
}

bool ext_node_failed(struct ext_node *n, char *why, size_t why_len)
{
    return status_failure(n->status, why, why_len);
}

int ext_node_tls_reload(struct ext_node *n, char *msg, size_t msg_len)
{
    return node_tls_reload(n->tls, &n->log, msg, msg_len);
}

uint64_t ext_node_leader(struct ext_node *n)
{
    return status_leader(n->status);
}

struct ext_node_log *ext_node_logger(struct ext_node *n)
{
    return &n->log;
}

uint64_t ext_node_id(const struct ext_node *n)
{
    return n->cfg.id;
}

bool ext_node_cluster_id(struct ext_node *n, char out[EXT_CLUSTER_ID_HEX])
{
    cluster_id_hex(n->cluster, out);
    return out[0] != '\0';
}

int ext_node_change(struct ext_node *n, const struct ext_change_request *req,
                    const struct ext_exec_probe *probe,
                    struct ext_change_result *out)
{
    return change_submit(n->change, req, n->cfg.exec_timeout_ms, probe, out);
}

void ext_node_listen(const struct ext_node *n, char *buf, size_t len)
{
    ext_config_listen_format(&n->cfg, buf, len);
}

unsigned ext_node_members(struct ext_node *n, struct ext_member_row *rows,
                          unsigned max)
{
    unsigned k = change_members(n->change, rows, max);
    for (unsigned i = 0; i < k; i++) {
        rows[i].checksum_differs = divergence_peer(n->divergence, rows[i].id);
    }
    return k;
}

bool ext_node_diverged(struct ext_node *n, char *why, size_t why_len)
{
    return repair_refusal(n->repair, n->applier, why, why_len);
}

bool ext_node_stale(struct ext_node *n, char *why, size_t why_len)
{
    struct ext_staleness_verdict v;
    staleness_get(n->staleness, &v);
    if (v.stale) {
        snprintf(why, why_len, "%s", v.reason);
    }
    return v.stale;
}

/* pace_commit is the commit index the pace of large snapshot writes
 * watches (struct sql_pace): the tick's latest known_commit. Any
 * thread. */
static uint64_t pace_commit(void *arg)
{
    struct ext_node *n = arg;

    return atomic_load(&n->known_commit);
}

/* copy_begin is the copy gate's begin (ext_node_copy_gate): the lease's
 * (lease_copy_begin), then a wait of exec_timeout_ms at most until this
 * node applied the last entry a plain write committed to the file, with
 * a line at INFO when it waits. */
static int copy_begin(void *arg, char *why, size_t why_len)
{
    struct ext_node *n = arg;
    raft_index landed = lease_copy_begin(n->lease);

    if (landed == 0 || applier_applied(n->applier) >= landed) {
        return 0;
    }
    node_log_line(&n->log, RAFT_LOG_INFO,
                  "copy of the database: waits until this node recorded "
                  "entry %llu, which a plain write committed to the file",
                  (unsigned long long)landed);
    if (applier_wait_applied(n->applier, landed, n->cfg.exec_timeout_ms)) {
        return 0;
    }
    lease_copy_end(n->lease);
    snprintf(why, why_len,
             "a plain write transaction committed entry %llu to the file, "
             "and this node did not record it within exec_timeout_ms (%u "
             "ms: its writer has not let the write lease go): a copy made "
             "now would hold it under the index before it; try again",
             (unsigned long long)landed, n->cfg.exec_timeout_ms);
    return SQL_ERR_BUSY;
}

/* copy_end is the copy gate's end. */
static void copy_end(void *arg)
{
    struct ext_node *n = arg;

    lease_copy_end(n->lease);
}

void ext_node_copy_gate(struct ext_node *n, struct sql_copy_gate *out)
{
    out->begin = copy_begin;
    out->end = copy_end;
    out->arg = n;
}

int ext_node_copy_check(struct ext_node *n, const char *path, const char *what,
                        char *errmsg, size_t errmsg_len)
{
    return applier_copy_check(n->applier, path, what, errmsg, errmsg_len);
}

void ext_node_mark_diverged(struct ext_node *n, const char *reason)
{
    applier_mark_diverged(n->applier, reason);
}

int ext_node_repair(struct ext_node *n, const struct ext_exec_probe *probe,
                    char *msg, size_t msg_len)
{
    return repair_wait(n->repair, n->applier, n->driver, n->cfg.exec_timeout_ms,
                       probe, msg, msg_len);
}

void ext_node_shutdown(struct ext_node *n)
{
    /* A stopping server takes no leadership (a stopping leader's
     * transfer, say, to this one): it would stop leading a moment
     * later, an election timeout without a leader. */
    raft_uv_node_decline_leadership(n->driver);
    if (status_role(n->status) == RAFT_LEADER) {
        struct ext_change_request q = {.op = EXT_CHANGE_TRANSFER};
        struct ext_change_result r;
        /* Hand the leadership on first: the followers need not wait for
         * an election timeout. Writes waiting meanwhile are retried
         * under the new leader. */
        if (change_submit(n->change, &q, n->cfg.election_timeout_ms, NULL,
                          &r) == 0) {
            node_log_line(&n->log, RAFT_LOG_INFO,
                          "stopping: leadership handed to server %llu",
                          (unsigned long long)r.leader);
        } else {
            node_log_line(&n->log, RAFT_LOG_INFO,
                          "stopping: no leadership transfer: %s", r.errmsg);
        }
    }
    change_shutdown(n->change);
    barrier_shutdown(n->barrier);
    lease_shutdown(n->lease);
    exec_fail_all(n->exec, "the node is shutting down (raft_stop)");
}

int ext_node_barrier(struct ext_node *n, const struct ext_exec_probe *probe,
                     uint64_t *out_index, char *msg, size_t msg_len)
{
    char why[512];
    int rc;
    if (!repair_refusal(n->repair, n->applier, why, sizeof why)) {
        rc = barrier_wait(n->barrier, n->driver, n->applier, probe, out_index,
                          msg, msg_len);
        if (rc != RAFT_DIVERGED ||
            !repair_refusal(n->repair, n->applier, why, sizeof why)) {
            return rc;
        }
    }
    /* A diverged replica applies nothing until repaired: no read index
     * is reached, say why at once. */
    snprintf(msg, msg_len, "raft_barrier: %s", why);
    return RAFT_DIVERGED;
}

int ext_node_lease_acquire(struct ext_node *n, uint64_t holder, unsigned flags,
                           uint64_t *out_id, char *why, size_t why_len)
{
    char diverged[512];
    /* A transaction here could read a write made while no node ran and
     * ship it to every replica in its changeset: it waits for the start's
     * scan, as long as a writer waits in the lease's queue (briefly on
     * its busy handler's retry). */
    uint64_t patience = lease_patience_ms(n->lease, holder);
    for (uint64_t i = 0;
         i < patience / 5 && applier_start_scan_pending(n->applier); i++) {
        struct timespec t = {0, 5 * 1000000L};
        nanosleep(&t, NULL);
    }
    if (applier_start_scan_pending(n->applier)) {
        lease_note_busy(n->lease, holder);
        snprintf(why, why_len,
                 "this node verifies its database against the running "
                 "checksum since its start (raft_status() start_verify): "
                 "its plain writes wait for that scan; raft_exec is served");
        return RAFT_BUSY;
    }
    /* After the wait: a scan that found a write made while no node ran
     * marked the replica diverged before it ended. */
    if (repair_refusal(n->repair, n->applier, diverged, sizeof diverged)) {
        snprintf(why, why_len, "%s", diverged);
        return RAFT_DIVERGED;
    }
    return lease_acquire(n->lease, holder, (flags & EXT_LEASE_ONE_TRY) != 0,
                         out_id, why, why_len);
}

int ext_node_lease_commit(struct ext_node *n, uint64_t id, const void *p,
                          size_t len, const struct ext_exec_probe *probe,
                          const unsigned char *locked, char *why,
                          size_t why_len)
{
    char diverged[512];
    /* A replica marked diverged while the lease was held (a foreign write
     * found since the grant) sends nothing: the changeset's old rows
     * could be the foreign ones, which every other replica would refuse. */
    if (repair_refusal(n->repair, n->applier, diverged, sizeof diverged)) {
        lease_release(n->lease, id, NULL);
        snprintf(why, why_len, "not applied: %s", diverged);
        return RAFT_DIVERGED;
    }
    return lease_commit(n->lease, id, p, len, probe, locked, why, why_len);
}

void ext_node_lease_release(struct ext_node *n, uint64_t id,
                            const struct sql_wal_marks *marks)
{
    lease_release(n->lease, id, marks);
}

int ext_node_lease_end(struct ext_node *n, const struct ext_exec_probe *probe,
                       char *msg, size_t msg_len)
{
    (void)probe; /* it does not wait */
    raft_id leader = ext_node_leader(n);
    int rc = lease_end(n->lease, msg, msg_len);

    if (rc == RAFT_NOTFOUND && leader != 0 && leader != n->cfg.id) {
        snprintf(msg, msg_len,
                 "no write lease is in force on this node: the leader, "
                 "server %llu, grants them; call raft_lease_end() there",
                 (unsigned long long)leader);
    }
    return rc;
}
