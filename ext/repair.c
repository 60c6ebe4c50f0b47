/* Repairing a diverged replica (repair.h).
 *
 * Happy path, follower: the applier sees a foreign commit and holds ->
 * repair_on_tick sends RAFT_FRAME_REPAIR_REQUEST (its applied index) to
 * the leader -> the leader's driver makes a snapshot at least at that
 * index and streams it (raft/uv_snapshot.c) -> the store installs it
 * although it does not lie above the applied index (store.c, covers) ->
 * the applier's divergence ends and the next tick logs the repair.
 * Happy path, leader: a leadership transfer first (nothing of the leader's
 * diverged database is ever sent: applier_snapshot_create refuses), then
 * as a follower.
 * Failure modes: a lost request or snapshot is asked again every
 * retry_ms; a cluster with no other voter, no known leader or a leader
 * on wire version 1 leaves the replica diverged, and raft_status() says
 * why; with repair=manual nothing happens before raft_repair(). */

#include "repair.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../raft/message.h"
#include "../raft/uv_node.h"
#include "exec.h"

struct ext_repair {
    uint64_t id;                /* this server */
    bool manual;                /* repair=manual */
    struct ext_node_log *log;   /* the node's lines */
    atomic_bool asked;          /* raft_repair() was called */
    atomic_int phase;           /* enum ext_repair_phase */
    atomic_uint_least64_t peer; /* whom it asked, or repairs from */
    uint64_t last_try;          /* loop clock of the last request or
                                      transfer, ms (loop) */
    uint64_t n_repairs_seen;    /* applier_repairs already logged
                                      (loop) */
    uint64_t installs_seen;     /* the driver's installs counted while
                                   no repair was new (its sender is
                                   known once the count moves on) */
};

int repair_new(uint64_t id, bool manual, struct ext_node_log *log,
               struct ext_repair **out)
{
    struct ext_repair *r = calloc(1, sizeof *r);
    if (r == NULL) {
        return RAFT_NOMEM;
    }
    r->id = id;
    r->manual = manual;
    r->log = log;
    *out = r;
    return 0;
}

void repair_free(struct ext_repair *r)
{
    free(r);
}

void repair_ask(struct ext_repair *r)
{
    atomic_store(&r->asked, true);
}

int repair_phase(const struct ext_repair *r, uint64_t *out_peer)
{
    *out_peer = atomic_load(&r->peer);
    return atomic_load(&r->phase);
}

void repair_describe(int phase, uint64_t peer, char *out, size_t len)
{
    switch (phase) {
        case EXT_REPAIR_MANUAL:
            snprintf(out, len, "waiting for raft_repair() (repair=manual)");
            break;
        case EXT_REPAIR_TRANSFER:
            snprintf(out, len,
                     "handing the leadership on, then repairing as a "
                     "follower");
            break;
        case EXT_REPAIR_REQUESTED:
            snprintf(out, len, "asked server %" PRIu64 " for a snapshot", peer);
            break;
        case EXT_REPAIR_NO_LEADER:
            snprintf(out, len, "no leader known to repair from");
            break;
        case EXT_REPAIR_NO_PEER:
            snprintf(out, len,
                     "no peer to repair from: this server is the only "
                     "voter (stays diverged)");
            break;
        case EXT_REPAIR_OLD_LEADER:
            snprintf(out, len,
                     "the leader, server %" PRIu64
                     ", speaks wire version 1, which has no repair: "
                     "upgrade it",
                     peer);
            break;
        default:
            snprintf(out, len, "starting");
            break;
    }
}

bool repair_refusal(const struct ext_repair *r, struct ext_applier *a,
                    char *out, size_t len)
{
    struct ext_applier_divergence dv;
    char what[160];
    uint64_t peer;
    if (!applier_diverged(a, &dv)) {
        return false;
    }
    int phase = repair_phase(r, &peer);
    repair_describe(phase, peer, what, sizeof what);
    snprintf(out, len, "diverged replica: %s; repair: %s", dv.reason, what);
    return true;
}

/* set_phase records @phase (with @peer) and logs a change at WARN. */
static void set_phase(struct ext_repair *r, int phase, uint64_t peer)
{
    char what[160];
    int old = atomic_exchange(&r->phase, phase);
    uint64_t old_peer = atomic_exchange(&r->peer, peer);
    if (old != phase || old_peer != peer) {
        repair_describe(phase, peer, what, sizeof what);
        node_log_line(r->log, RAFT_LOG_WARN, "diverged replica: repair: %s",
                      what);
    }
}

/* lead_off hands the leadership on (a transfer to the most caught-up
 * voter), or says there is nobody to hand it to. */
static void lead_off(struct ext_repair *r, struct raft_uv_node *d)
{
    struct raft_event ev;
    int rc;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_EVENT_TRANSFER;
    rc = raft_uv_node_change(d, &ev, NULL);
    if (rc == RAFT_NOTFOUND) {
        set_phase(r, EXT_REPAIR_NO_PEER, 0);
    } else {
        set_phase(r, EXT_REPAIR_TRANSFER, 0);
    }
}

/* ask_leader sends the leader a repair request: a snapshot at least at
 * @applied. */
static void ask_leader(struct ext_repair *r, struct raft_uv_node *d,
                       raft_id leader, uint64_t applied)
{
    struct raft_frame f;
    unsigned wire = raft_uv_node_peer_wire(d, leader);
    if (wire != 0 &&
        wire < raft_frame_type_wire_min(RAFT_FRAME_REPAIR_REQUEST)) {
        set_phase(r, EXT_REPAIR_OLD_LEADER, leader);
        return;
    }
    memset(&f, 0, sizeof f);
    f.type = RAFT_FRAME_REPAIR_REQUEST;
    f.from = r->id;
    f.to = leader;
    f.repair_request.applied = applied;
    /* Lost or not connected yet: asked again after retry_ms. */
    (void)raft_uv_node_send_frame(d, &f);
    set_phase(r, EXT_REPAIR_REQUESTED, leader);
}

bool repair_on_tick(struct ext_repair *r, struct raft_uv_node *d,
                    struct ext_applier *a, unsigned retry_ms)
{
    const struct raft *core = raft_uv_node_core(d);
    uint64_t repairs = applier_repairs(a);
    uint64_t now = raft_uv_node_now(d);
    struct raft_uv_node_stats st;
    raft_id leader;
    bool first;

    raft_uv_node_stats(d, &st);
    if (repairs == r->n_repairs_seen) {
        r->installs_seen = st.n_snapshots_installed;
    } else if (st.n_snapshots_installed > r->installs_seen) {
        /* The state machine took the snapshot on the storage thread
         * first; the driver names its sender once it counts it, at the
         * end of that storage step (a tick may come between). */
        struct ext_applier_divergence dv;
        applier_diverged(a, &dv);
        r->n_repairs_seen = repairs;
        r->installs_seen = st.n_snapshots_installed;
        node_log_line(r->log, RAFT_LOG_WARN,
                      "diverged replica repaired from server %" PRIu64
                      "'s snapshot at index %" PRIu64 " (it had diverged: %s)",
                      st.last_install_from, dv.repaired_index, dv.reason);
    }
    if (!applier_diverged(a, NULL)) {
        atomic_store(&r->asked, false);
        atomic_store(&r->phase, EXT_REPAIR_NONE);
        atomic_store(&r->peer, 0);
        return false;
    }
    first = atomic_load(&r->phase) == EXT_REPAIR_NONE;
    if (r->manual && !atomic_load(&r->asked)) {
        set_phase(r, EXT_REPAIR_MANUAL, 0);
        return first;
    }
    if (atomic_load(&r->phase) > EXT_REPAIR_MANUAL &&
        now < r->last_try + retry_ms) {
        return first;
    }
    r->last_try = now;
    leader = raft_leader_id(core);
    if (raft_role(core) == RAFT_LEADER) {
        lead_off(r, d);
    } else if (leader == 0) {
        set_phase(r, EXT_REPAIR_NO_LEADER, 0);
    } else {
        ask_leader(r, d, leader, applier_applied(a));
    }
    return first;
}

int repair_wait(struct ext_repair *r, struct ext_applier *a,
                struct raft_uv_node *d, unsigned timeout_ms,
                const struct ext_exec_probe *probe, char *msg, size_t msg_len)
{
    struct timespec deadline = exec_deadline(timeout_ms);
    const struct timespec pause = {.tv_nsec = 10 * 1000000};
    struct ext_applier_divergence dv;
    uint64_t repairs = applier_repairs(a);
    uint64_t peer;

    if (!applier_diverged(a, NULL)) {
        snprintf(msg, msg_len, "not diverged: nothing to repair");
        return RAFT_INVALID;
    }
    repair_ask(r);
    raft_uv_node_wake(d);
    while (applier_repairs(a) == repairs) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (probe != NULL && probe->interrupted(probe->data)) {
            snprintf(msg, msg_len, "interrupted (the repair goes on)");
            return RAFT_CANCELED;
        }
        if (repair_phase(r, &peer) == EXT_REPAIR_NO_PEER) {
            repair_refusal(r, a, msg, msg_len);
            return RAFT_NOTFOUND;
        }
        if (now.tv_sec > deadline.tv_sec || (now.tv_sec == deadline.tv_sec &&
                                             now.tv_nsec >= deadline.tv_nsec)) {
            repair_refusal(r, a, msg, msg_len);
            return RAFT_TIMEOUT;
        }
        nanosleep(&pause, NULL);
    }
    applier_diverged(a, &dv);
    snprintf(msg, msg_len, "repaired from a snapshot at index %" PRIu64,
             dv.repaired_index);
    return 0;
}
