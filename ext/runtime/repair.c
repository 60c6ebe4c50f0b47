/* Repairing a diverged replica (repair.h).
 *
 * The repair request is one leader call (leader_call.h), opened by the
 * tick that starts a repair and DONE once an install ends the
 * divergence; leader_call_take_due decides when it goes (again), and
 * refuses it while the leader speaks a wire without the request.
 * Happy path, follower: the applier sees a foreign commit and holds ->
 * repair_on_tick sends RAFT_FRAME_REPAIR_REQUEST (its applied index) to
 * the leader -> the leader's driver makes a snapshot at least at that
 * index and streams it (raft/uv_snapshot.c) -> the applier installs it
 * although it does not lie above the applied index
 * (the install of applier_persist_fsm, its covers check) ->
 * the applier's divergence ends and the next tick logs the repair.
 * Happy path, leader: a leadership transfer first, to the most caught-up
 * voter that is not diverged itself (it sent no REPAIR_REQUEST lately;
 * nothing of the leader's diverged database is ever sent:
 * applier_snapshot_create refuses), the call counting as sent to this
 * server, then as a follower, asking the new leader at once. A diverged
 * server declines transfers (TimeoutNow), so leadership never bounces
 * between two diverged servers.
 * Failure modes: a lost request or snapshot is asked again every
 * retry_ms, and a new leader at once; a cluster with no other voter,
 * with every other voter diverged too, no known leader or a leader on
 * wire version 1 leaves the replica diverged, and raft_status() says
 * why; with repair=manual nothing happens before raft_repair(). */

#include "repair.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../raft/message.h"
#include "../../raft/uv_node.h"
#include "exec.h"
#include "leader_call.h"

/* How often raft_repair() looks whether the repair is done, ms. */
#define EXT__REPAIR_POLL_MS 10

/* Only where the repair stands: whether the replica is diverged, why,
 * since when and how many repairs ended a divergence are the applier's
 * (applier_diverged, applier_repairs), asked each time; the driver asks
 * it too (raft_uv_node_callbacks.diverged). */
struct ext_repair {
    uint64_t id;                        /* this server */
    bool manual;                        /* repair=manual */
    struct ext_node_log *log;           /* the node's lines */
    atomic_bool asked;                  /* raft_repair() was called */
    atomic_int phase;                   /* enum ext_repair_phase */
    atomic_uint_least64_t peer;         /* whom it asked, or repairs from */
    struct ext_leader_call call;        /* the repair request: QUEUED until a
                                    leader is known, SENT to it (to this
                                    server while it hands its leadership
                                    on), DONE once a divergence ended
                                    (loop; no caller waits on it:
                                    raft_repair() polls the applier) */
    bool has_call;                      /* @call was opened into @calls */
    struct ext_leader_call_table calls; /* @call alone, while open (loop) */
    uint64_t n_repairs_seen;            /* applier_repairs already logged
                                      (loop) */
    uint64_t installs_seen;             /* the driver's installs counted while
                                   no repair was new (its sender is
                                   known once the count moves on) */
    pthread_mutex_t mu;                 /* guards @what */
    char what[200]; /* the phase described (repair_describe) */
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
    pthread_mutex_init(&r->mu, NULL);
    snprintf(r->what, sizeof r->what, "starting");
    *out = r;
    return 0;
}

void repair_free(struct ext_repair *r)
{
    if (r != NULL) {
        if (r->has_call) {
            leader_call_close(&r->calls, &r->call);
        }
        pthread_mutex_destroy(&r->mu);
    }
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

/* describe writes what @phase means, with @peer and, for
 * EXT_REPAIR_NO_HEALTHY, the diverged voters @others ("2, 3", @n_others of
 * them), into @out (@len bytes). */
static void describe(int phase, uint64_t peer, const char *others,
                     unsigned n_others, char *out, size_t len)
{
    switch (phase) {
        case EXT_REPAIR_MANUAL:
            snprintf(out, len, "waiting for raft_repair() (repair=manual)");
            break;
        case EXT_REPAIR_TRANSFER:
            snprintf(out, len,
                     "handing the leadership on to server %" PRIu64
                     ", then repairing as a follower",
                     peer);
            break;
        case EXT_REPAIR_NO_HEALTHY:
            snprintf(out, len,
                     "no healthy peer to repair from: server%s %s %s "
                     "diverged too (stays diverged, leading)",
                     n_others > 1 ? "s" : "", others,
                     n_others > 1 ? "are" : "is");
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

void repair_describe(struct ext_repair *r, char *out, size_t len)
{
    pthread_mutex_lock(&r->mu);
    snprintf(out, len, "%s", r->what);
    pthread_mutex_unlock(&r->mu);
}

bool repair_refusal(struct ext_repair *r, struct ext_applier *a, char *out,
                    size_t len)
{
    struct ext_applier_divergence dv;
    char what[sizeof r->what];
    if (!applier_diverged(a, &dv)) {
        return false;
    }
    repair_describe(r, what, sizeof what);
    snprintf(out, len, "diverged replica: %s; repair: %s", dv.reason, what);
    return true;
}

/* set_phase records @phase (with @peer and, for EXT_REPAIR_NO_HEALTHY,
 * the @n_others diverged voters @others) and logs a change: at ERROR
 * when no healthy peer is left, else at WARN. */
static void set_phase(struct ext_repair *r, int phase, uint64_t peer,
                      const char *others, unsigned n_others)
{
    char what[sizeof r->what];
    bool changed;
    describe(phase, peer, others, n_others, what, sizeof what);
    pthread_mutex_lock(&r->mu);
    changed = strcmp(what, r->what) != 0;
    snprintf(r->what, sizeof r->what, "%s", what);
    atomic_store(&r->phase, phase);
    atomic_store(&r->peer, peer);
    pthread_mutex_unlock(&r->mu);
    if (changed && phase == EXT_REPAIR_NO_HEALTHY) {
        node_log_error(r->log, "diverged replica: repair: %s", what);
    } else if (changed) {
        node_log_line(r->log, RAFT_LOG_WARN, "diverged replica: repair: %s",
                      what);
    }
}

/* lead_off hands the leadership to the most caught-up voter (the lowest
 * slot on ties) that did not ask for a repair lately, or says there is
 * nobody to hand it to. Leader only. */
static void lead_off(struct ext_repair *r, struct raft_uv_node *d)
{
    const struct raft *core = raft_uv_node_core(d);
    const struct raft_configuration *c = raft_current_configuration(core);
    raft_id best = 0;
    raft_index best_match = 0;
    unsigned n_voters = 0, n_others = 0;
    char others[120] = "";
    struct raft_event ev;

    for (unsigned i = 0; i < c->n; i++) {
        const struct raft_server *sv = &c->servers[i];
        struct raft_progress_info pi;
        size_t used = strlen(others);
        if (sv->id == r->id || sv->role != RAFT_VOTER) {
            continue;
        }
        n_voters++;
        if (raft_uv_node_peer_repair_age(d, sv->id) < EXT__REPAIR_DIVERGED_MS) {
            snprintf(others + used, sizeof others - used, "%s%" PRIu64,
                     n_others++ > 0 ? ", " : "", sv->id);
        } else if (raft_progress(core, sv->id, &pi) == 0 &&
                   (best == 0 || pi.match_index > best_match)) {
            best = sv->id;
            best_match = pi.match_index;
        }
    }
    if (n_voters == 0) {
        set_phase(r, EXT_REPAIR_NO_PEER, 0, "", 0);
    } else if (best == 0) {
        set_phase(r, EXT_REPAIR_NO_HEALTHY, 0, others, n_others);
    } else {
        memset(&ev, 0, sizeof ev);
        ev.type = RAFT_EVENT_TRANSFER;
        ev.transfer.id = best;
        /* RAFT_BUSY: a transfer runs already (tried again later). */
        (void)raft_uv_node_change(d, &ev, NULL);
        set_phase(r, EXT_REPAIR_TRANSFER, best, "", 0);
    }
}

/* ask_leader sends the leader a repair request: a snapshot at least at
 * @applied (the call taken SENT to it, its wire gate passed). */
static void ask_leader(struct ext_repair *r, struct raft_uv_node *d,
                       raft_id leader, uint64_t applied)
{
    struct raft_frame f;

    memset(&f, 0, sizeof f);
    f.type = RAFT_FRAME_REPAIR_REQUEST;
    f.from = r->id;
    f.to = leader;
    f.repair_request.applied = applied;
    /* Lost or not connected yet: asked again after retry_ms. */
    (void)raft_uv_node_send_frame(d, &f);
    set_phase(r, EXT_REPAIR_REQUESTED, leader, "", 0);
}

/* end_call ends the repair request of @r, if any: the divergence ended
 * (DONE). */
static void end_call(struct ext_repair *r)
{
    if (r->has_call && r->call.state != EXT_CALL_DONE) {
        leader_call_finish(&r->call);
    }
}

/* open_call makes the repair request of @r a new QUEUED call, unless one
 * is open. Returns false when it could not (no memory: the next tick
 * tries again). */
static bool open_call(struct ext_repair *r)
{
    if (r->has_call && r->call.state != EXT_CALL_DONE) {
        return true;
    }
    if (r->has_call) {
        leader_call_close(&r->calls, &r->call);
        r->has_call = false;
    }
    /* Its deadline is never asked (nobody waits on it): it goes on while
     * the replica is diverged. */
    if (leader_call_open(&r->calls, &r->call, r, NULL, 0, 0) != 0) {
        return false;
    }
    leader_call_need_wire(&r->call,
                          raft_frame_type_wire_min(RAFT_FRAME_REPAIR_REQUEST));
    r->has_call = true;
    return true;
}

bool repair_on_tick(struct ext_repair *r, struct raft_uv_node *d,
                    struct ext_applier *a, unsigned retry_ms)
{
    const struct raft *core = raft_uv_node_core(d);
    uint64_t repairs = applier_repairs(a);
    uint64_t now = raft_uv_node_now(d);
    /* Asked again every retry_ms, and at once of a new leader (a leader
     * that handed its leadership on asks the new one at once). */
    const struct ext_leader_call_policy resend = {.retry_ms = retry_ms,
                                                  .follow_leader = true};
    struct raft_uv_node_stats st;
    bool leading = raft_role(core) == RAFT_LEADER;
    raft_id leader = leading ? r->id : raft_leader_id(core);
    /* Leading, it goes to this node's own transfer: no frame. */
    const struct ext_leader_call_server to = {
        .id = leader,
        .wire = leading       ? EXT_LEADER_CALL_WIRE_ANY
                : leader != 0 ? raft_uv_node_peer_wire(d, leader)
                              : 0};
    bool first, refused;

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
        end_call(r);
        if (atomic_load(&r->phase) != EXT_REPAIR_NONE) {
            pthread_mutex_lock(&r->mu);
            atomic_store(&r->phase, EXT_REPAIR_NONE);
            atomic_store(&r->peer, 0);
            snprintf(r->what, sizeof r->what, "starting");
            pthread_mutex_unlock(&r->mu);
        }
        return false;
    }
    first = atomic_load(&r->phase) == EXT_REPAIR_NONE;
    if (r->manual && !atomic_load(&r->asked)) {
        set_phase(r, EXT_REPAIR_MANUAL, 0, "", 0);
        return first;
    }
    if (!open_call(r) ||
        leader_call_take_due(&r->calls, NULL, &resend, &to, now, NULL, NULL,
                             &refused) == NULL) {
        return first;
    }
    if (refused) {
        /* The leader's wire has no repair request: asked again at the
         * next tick. */
        set_phase(r, EXT_REPAIR_OLD_LEADER, leader, "", 0);
    } else if (leading) {
        /* Sent to this server: a transfer (or why none), tried again
         * after retry_ms, and the new leader asked at once. */
        lead_off(r, d);
    } else if (leader == 0) {
        leader_call_unsend(&r->call); /* due again at the next tick */
        set_phase(r, EXT_REPAIR_NO_LEADER, 0, "", 0);
    } else {
        ask_leader(r, d, leader, applier_applied(a));
    }
    return first;
}

/* A raft_repair() waiting: done once an install ended the divergence
 * (the applier counts repairs), or once no peer is left to repair from. */
struct repair_waiting {
    struct ext_repair *r;
    struct ext_applier *a;
    uint64_t repairs; /* applier_repairs when it began */
};

/* repair_over says whether the wait of @data (struct repair_waiting)
 * ends: repaired, or nobody to repair from. */
static bool repair_over(void *data)
{
    const struct repair_waiting *w = data;
    uint64_t peer;
    int phase;

    if (applier_repairs(w->a) != w->repairs) {
        return true;
    }
    phase = repair_phase(w->r, &peer);
    return phase == EXT_REPAIR_NO_PEER || phase == EXT_REPAIR_NO_HEALTHY;
}

int repair_wait(struct ext_repair *r, struct ext_applier *a,
                struct raft_uv_node *d, unsigned timeout_ms,
                const struct ext_exec_probe *probe, char *msg, size_t msg_len)
{
    struct timespec deadline = leader_call_deadline(timeout_ms);
    struct repair_waiting w = {.r = r, .a = a};
    struct ext_applier_divergence dv;
    int end;

    if (!applier_diverged(a, NULL)) {
        snprintf(msg, msg_len, "not diverged: nothing to repair");
        return RAFT_INVALID;
    }
    w.repairs = applier_repairs(a);
    repair_ask(r);
    raft_uv_node_wake(d);
    end = leader_call_poll(&deadline, EXT__REPAIR_POLL_MS, probe, repair_over,
                           &w);
    if (end == EXT_CALL_INTERRUPTED) {
        snprintf(msg, msg_len, "interrupted (the repair goes on)");
        return RAFT_CANCELED;
    }
    if (applier_repairs(a) == w.repairs) {
        repair_refusal(r, a, msg, msg_len);
        return end == EXT_CALL_ANSWERED ? RAFT_NOTFOUND : RAFT_TIMEOUT;
    }
    applier_diverged(a, &dv);
    snprintf(msg, msg_len, "repaired from a snapshot at index %" PRIu64,
             dv.repaired_index);
    return 0;
}
