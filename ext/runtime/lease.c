/* The write lease (lease.h) for the node's threads: the mutex and the
 * condition variable its holders wait on, the applier's hold, and the
 * driver's calls (wake, send, propose) around the lease's rules, which
 * live in lease_core.c (pure: the simulation runs them too).
 *
 * Happy path: lease_acquire asks (lease_core_ask) and waits until the
 * loop answered; lease_on_loop runs lease_core_loop, which grants it
 * (the applier held above the leader's last index G), and the holder
 * waits until G is applied here; lease_commit queues the changeset and
 * waits; the loop proposes it as entry G + 1 outside the mutex
 * (lease_core_proposed) and answers once the commit index reaches it
 * (lease_core_loop_end); lease_release ends the applier hold.
 * Failure modes: as lease_core.c says; here, a holder's wait ends at
 * exec_timeout_ms, at the node's shutdown, or when its probe says it was
 * interrupted. */

#include "lease.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../sql/changeset.h"
#include "lease_busy.h"
#include "lease_core.h"
#include "wire_gate.h"

SQLITE_EXTENSION_INIT3

struct ext_lease {
    struct raft_uv_node *driver; /* set by lease_attach */
    struct ext_applier *applier; /* set by lease_attach */
    pthread_mutex_t mu;          /* guards every field below */
    pthread_cond_t cond;         /* an ask or a commit was answered */
    atomic_bool active;          /* anything is out (the loop's fast path:
                                     written under mu) */
    atomic_bool stalled;         /* this node's log cannot take entries
                                    (disk full, a failed log) or its
                                    applier fails: it cannot catch up to
                                    a grant (the loop's view, each wake
                                    and tick) */
    atomic_bool removed;         /* this node was removed from the
                                    cluster (lease_set_removed): it
                                    cannot catch up either */
    _Atomic uint64_t removed_at; /* the configuration entry that removed
                                    it (0: one from a snapshot) */
    struct lease_core core;      /* the lease's state and rules */

    /* lease_set_change_test's test, and its argument. */
    bool (*change_waiting)(void *arg);
    void *change_arg;

    struct lease_waiter *queue; /* the writers waiting to ask, in order:
                                    only the first asks */
    uint64_t asked_for;         /* the holder whose ask is out or
                                    answered and not yet taken (ask,
                                    ask_for_first), 0: none */
    uint64_t hold_id;           /* the lease a writer of this node holds
                                    (from its grant to its release), 0 */
    uint64_t hold_since_ms;     /* when it was granted, CLOCK_MONOTONIC */
    uint64_t hold_ticket;       /* its writer's ticket (lease_acquire) */
    uint64_t next_ticket;       /* the last ticket handed out: the order
                                    in which this node's writers came */
    uint64_t n_holds, n_waits, n_busy;  /* lease_view's */
    struct raft_histogram hold_seconds; /* lease_view's */
    struct ext_lease_busy busy;         /* the writers lately answered
                                           busy (kept_ticket, queue_ms) */

    /* The copies' gate (lease_copy_begin): while @copying, a holder of
     * this node answered committed waits before it commits to the file
     * (on @copy_cond); @landed is the highest entry a holder of this node
     * went on to commit to the file itself. */
    unsigned copying;
    pthread_cond_t copy_cond;
    raft_index landed;
};

/* How long a writer of this node waits in its queue for the lease
 * before it answers SQLITE_BUSY (and SQLite's busy handler sleeps and
 * asks again), ms: the writers of a node ask in turn, the first as soon
 * as the lease is released (or, held elsewhere, again every
 * EXT__LEASE_RETRY_MS), not when a busy handler's sleep ends. */
#define EXT__LEASE_QUEUE_MS 250
#define EXT__LEASE_RETRY_MS 2
/* A writer asking again within EXT__LEASE_AGAIN_MS of being answered
 * busy is its busy handler's retry: it waits EXT__LEASE_AGAIN_QUEUE_MS
 * in the queue, not EXT__LEASE_QUEUE_MS. SQLite's busy timeout counts
 * only its handler's own sleeps (1, 2, 5, ... 100 ms by the number of
 * calls), so 250 ms more at each retry made a writer meet SQLITE_BUSY
 * after three to four times its busy timeout. */
#define EXT__LEASE_AGAIN_MS 250
#define EXT__LEASE_AGAIN_QUEUE_MS 20
/* Granted, a writer waits for its node to apply up to the grant's index
 * while the entries up to it are committed here or the applied index
 * moves; once neither for EXT__LEASE_CATCHUP_MS (EXT__LEASE_AGAIN_CATCHUP_MS
 * on a busy handler's retry) the writer lets the lease go and answers
 * SQLITE_BUSY: nothing commits (no quorum: a voter's disk full, the
 * others down or learners), and a wait up to
 * exec_timeout_ms at each of the busy handler's retries made a writer
 * meet SQLITE_BUSY only after many times its busy timeout, holding the
 * cluster's lease each time. */
#define EXT__LEASE_CATCHUP_MS 500
#define EXT__LEASE_AGAIN_CATCHUP_MS 20
/* A writer with one try (lease_acquire's @one_try: its transaction read first,
 * and SQLite calls no busy handler for its write lock) refused for want
 * of a leader asks again every EXT__LEASE_LEADERLESS_RETRY_MS, up to
 * exec_timeout_ms, instead of answering SQLITE_BUSY after
 * EXT__LEASE_QUEUE_MS: with no leader nobody commits, so its snapshot
 * stays the latest, and once a leader is elected its write goes on as
 * on a file nobody else wrote; answered busy, the transaction was lost
 * to an election (an ORM session failing at COMMIT). Granted, it waits
 * for its node to catch up up to exec_timeout_ms too (the new leader's
 * first entry commits once a quorum acknowledged it). */
#define EXT__LEASE_LEADERLESS_RETRY_MS 20

/* A writer of this node queued for the lease (lease_acquire), on its
 * stack while it waits: each waits on a condition variable of its own,
 * signalled when it becomes the first (wake_queue), so that a release
 * wakes one writer, not all of them. */
struct lease_waiter {
    struct lease_waiter *next;
    uint64_t holder; /* its holder token */
    uint64_t ticket; /* its place in line: the queue is in ticket order */
    pthread_cond_t cond;
};

/* The words of a refusal while stalled. */
#define EXT__LEASE_STALLED                                                     \
    "this node's log cannot take entries (disk full, or a failed log: "        \
    "raft_status() log_full, log_failed) or its applier fails, so it "         \
    "cannot catch up for a plain write; it writes again once that clears"

/* now_ms returns CLOCK_MONOTONIC in ms. */
static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* deadline_ts sets @out to CLOCK_MONOTONIC ms @ms. */
static void deadline_ts(struct timespec *out, uint64_t ms)
{
    out->tv_sec = (time_t)(ms / 1000);
    out->tv_nsec = (long)(ms % 1000) * 1000000L;
}

/* wake_queue wakes the first writer queued for the lease (the lease or
 * this node's hold was let go: it asks now), or, with @all, every one (the
 * node is stopping). Caller holds mu. */
static void wake_queue(struct ext_lease *l, bool all)
{
    for (struct lease_waiter *w = l->queue; w != NULL; w = w->next) {
        pthread_cond_signal(&w->cond);
        if (!all) {
            break;
        }
    }
}

/* carry_out does what the lease's rules handed back in @out (but its
 * proposal): the applier's hold (ended with the writer's @marks of the
 * WAL, NULL when not known), the frames (through the driver: the loop's
 * calls only send), the waiting holders and the loop's wake; then keeps
 * the loop's fast path true. Caller holds mu. */
static void carry_out(struct ext_lease *l, const struct lease_core_out *out,
                      const struct sql_wal_marks *marks)
{
    unsigned i;

    if (out->hold_end) {
        applier_lease_end(l->applier, out->hold_landed, marks);
    }
    if (out->hold) {
        applier_lease_hold(l->applier, out->hold_from);
    }
    for (i = 0; i < out->n_send; i++) {
        (void)raft_uv_node_send_frame(l->driver, &out->send[i]); /* lost:
                                                    sent or asked again */
    }
    if (out->wake_holders) {
        pthread_cond_broadcast(&l->cond);
    }
    if (out->wake_loop && l->driver != NULL) {
        raft_uv_node_wake(l->driver);
    }
    atomic_store(&l->active, lease_core_active(&l->core));
}

/* peer_wire is lease_core_env.peer_wire over lease @arg's driver. */
static unsigned peer_wire(void *arg, raft_id id)
{
    struct ext_lease *l = arg;
    return raft_uv_node_peer_wire(l->driver, id);
}

/* gate is lease_core_env.gate over lease @arg's driver
 * (wire_gate_changeset). */
static int gate(void *arg, char *why, size_t why_len)
{
    struct ext_lease *l = arg;
    return wire_gate_changeset(l->driver, l->core.self, why, why_len) !=
           EXT_WIRE_GATE_OPEN;
}

/* loop_env fills @env with driver @d's core as it is now. Loop thread. */
static void loop_env(struct ext_lease *l, struct raft_uv_node *d,
                     struct lease_core_env *env)
{
    const struct raft *core = raft_uv_node_core(d);

    env->now_ms = now_ms();
    env->leading = raft_role(core) == RAFT_LEADER && raft_term_durable(core) &&
                   !raft_uv_node_failed(d);
    env->term = raft_current_term(core);
    env->leader = raft_leader_id(core);
    env->last_index = raft_last_index(core);
    env->commit_index = raft_commit_index(core);
    env->peer_wire = peer_wire;
    env->gate = gate;
    env->arg = l;
    env->change_waiting =
        l->change_waiting != NULL && l->change_waiting(l->change_arg);
}

/* cond_init initialises @c on CLOCK_MONOTONIC (the deadlines of
 * deadline_ts). */
static void cond_init(pthread_cond_t *c)
{
    pthread_condattr_t ca;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

int lease_new(raft_id self, unsigned lease_timeout_ms, unsigned exec_timeout_ms,
              uint64_t max_bytes, struct ext_lease **out)
{
    struct ext_lease *l = calloc(1, sizeof *l);

    if (l == NULL) {
        return RAFT_NOMEM;
    }
    lease_core_init(&l->core, self, lease_timeout_ms, exec_timeout_ms,
                    max_bytes);
    pthread_mutex_init(&l->mu, NULL);
    cond_init(&l->cond);
    cond_init(&l->copy_cond);
    raft_histogram_init(&l->hold_seconds, raft_histogram_seconds,
                        raft_histogram_n_seconds);
    *out = l;
    return 0;
}

void lease_set_change_test(struct ext_lease *l, bool (*waiting)(void *arg),
                           void *arg)
{
    pthread_mutex_lock(&l->mu);
    l->change_waiting = waiting;
    l->change_arg = arg;
    pthread_mutex_unlock(&l->mu);
}

void lease_attach(struct ext_lease *l, struct raft_uv_node *d,
                  struct ext_applier *a)
{
    pthread_mutex_lock(&l->mu);
    l->driver = d;
    l->applier = a;
    pthread_mutex_unlock(&l->mu);
}

void lease_free(struct ext_lease *l)
{
    if (l == NULL) {
        return;
    }
    lease_core_close(&l->core);
    pthread_cond_destroy(&l->cond);
    pthread_cond_destroy(&l->copy_cond);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* ---- The holder (host threads) ------------------------------------------ */

/* ask asks the loop for the lease for @holder and waits for its answer.
 * Returns 0 with the lease GRANTED to @holder (*@out_id, *@out_grant),
 * or a refusal. Caller holds mu. */
static int ask(struct ext_lease *l, uint64_t holder, uint64_t *out_id,
               raft_index *out_grant, char *why, size_t why_len)
{
    struct lease_core_out out;
    struct timespec until;
    int rc;

    if (l->asked_for != holder) {
        /* Not asked for it by the release before (ask_for_first). */
        lease_core_out_init(&out);
        rc = lease_core_ask(&l->core, holder, l->driver != NULL, now_ms(), why,
                            why_len, &out);
        carry_out(l, &out, NULL);
        if (rc != 0) {
            return rc;
        }
        l->asked_for = holder;
    }
    deadline_ts(&until, now_ms() + l->core.exec_timeout_ms);
    while (lease_core_asking(&l->core)) {
        if (pthread_cond_timedwait(&l->cond, &l->mu, &until) != 0) {
            break;
        }
    }
    l->asked_for = 0;
    rc = lease_core_ask_end(&l->core, why, why_len, out_id, out_grant);
    atomic_store(&l->active, lease_core_active(&l->core));
    return rc;
}

/* ask_for_first asks the loop for the lease for the first writer queued
 * for it, once the lease and this node's hold are let go: the ask is on
 * its way while that writer wakes (it takes the answer in ask). Nothing
 * when none waits, or the lease is not free here. Caller holds mu. */
static void ask_for_first(struct ext_lease *l)
{
    struct lease_core_out out;
    char why[256];

    if (l->queue == NULL || l->asked_for != 0) {
        return; /* lease_core_ask refuses what else is out */
    }
    lease_core_out_init(&out);
    if (lease_core_ask(&l->core, l->queue->holder, l->driver != NULL, now_ms(),
                       why, sizeof why, &out) == 0) {
        l->asked_for = l->queue->holder;
    }
    carry_out(l, &out, NULL);
}

/* kept_ticket returns the ticket (the place in line) @holder keeps when
 * it was answered busy within EXT__LEASE_AGAIN_MS (this is its busy
 * handler's retry), else 0. Caller holds mu. */
static uint64_t kept_ticket(struct ext_lease *l, uint64_t holder, uint64_t now)
{
    return lease_busy_kept(&l->busy, holder, now, EXT__LEASE_AGAIN_MS);
}

/* queue_ms returns how long a writer that keeps ticket @kept (0: none)
 * may wait in the queue now: briefly on its busy handler's retry
 * (kept_ticket), else EXT__LEASE_QUEUE_MS. */
static uint64_t queue_ms(uint64_t kept)
{
    return kept != 0 ? EXT__LEASE_AGAIN_QUEUE_MS : EXT__LEASE_QUEUE_MS;
}

/* note_busy records that @holder, in line at @ticket, was answered busy at
 * @now (@busy): its retry keeps its place; or forgets it (it got the
 * lease, or another answer). Caller holds mu. */
static void note_busy(struct ext_lease *l, uint64_t holder, uint64_t ticket,
                      uint64_t now, bool busy)
{
    lease_busy_note(&l->busy, holder, ticket, now, busy);
}

/* ticket_of returns the place in line of a writer that keeps ticket
 * @kept (0: none): that one, else a new one, after every other. Caller
 * holds mu. */
static uint64_t ticket_of(struct ext_lease *l, uint64_t kept)
{
    return kept != 0 ? kept : ++l->next_ticket;
}

/* note_busy_now records that @holder was answered busy now, keeping its
 * place in line (note_busy). Caller holds mu. */
static void note_busy_now(struct ext_lease *l, uint64_t holder)
{
    uint64_t now = now_ms();
    note_busy(l, holder, ticket_of(l, kept_ticket(l, holder, now)), now, true);
}

/* enqueue puts @me in this node's queue in ticket order (a busy
 * handler's retry back at the place it had), but never before a first
 * whose ask is out. Caller holds mu. */
static void enqueue(struct ext_lease *l, struct lease_waiter *me)
{
    struct lease_waiter **pp = &l->queue;

    if (*pp != NULL && l->asked_for == (*pp)->holder) {
        pp = &(*pp)->next;
    }
    while (*pp != NULL && (*pp)->ticket < me->ticket) {
        pp = &(*pp)->next;
    }
    me->next = *pp;
    *pp = me;
}

/* passed_over says whether a writer of this node that came after @me
 * holds the lease or is first in the queue, ahead of @me: it took the
 * turn while @me slept in its busy handler. Caller holds mu. */
static bool passed_over(const struct ext_lease *l,
                        const struct lease_waiter *me)
{
    return (l->hold_id != 0 && l->hold_ticket > me->ticket) ||
           (l->queue != me && l->queue->ticket > me->ticket);
}

uint64_t lease_patience_ms(struct ext_lease *l, uint64_t holder)
{
    uint64_t ms;

    pthread_mutex_lock(&l->mu);
    ms = queue_ms(kept_ticket(l, holder, now_ms()));
    pthread_mutex_unlock(&l->mu);
    return ms;
}

void lease_note_busy(struct ext_lease *l, uint64_t holder)
{
    pthread_mutex_lock(&l->mu);
    note_busy_now(l, holder);
    l->n_busy++;
    pthread_mutex_unlock(&l->mu);
}

/* say_removed writes into @why (@why_len bytes) why this node takes no
 * plain write, and returns true, when it was removed from the cluster;
 * false while it is a member. */
static bool say_removed(struct ext_lease *l, char *why, size_t why_len)
{
    if (!atomic_load(&l->removed)) {
        return false;
    }
    lease_core_say(why, why_len,
                   "this node was removed from the cluster (configuration "
                   "entry %llu committed): it receives no more entries, so "
                   "it takes no plain write; write on a member, or raft_add "
                   "it back",
                   (unsigned long long)atomic_load(&l->removed_at));
    return true;
}

void lease_set_removed(struct ext_lease *l, bool removed, raft_index conf_index)
{
    atomic_store(&l->removed_at, removed ? conf_index : 0);
    atomic_store(&l->removed, removed);
}

/* catchup_busy ends granted lease @id of @holder whose catch-up gave up
 * (the caller answers busy), noting the busy answer so that the busy
 * handler's retry waits briefly (queue_ms). */
static void catchup_busy(struct ext_lease *l, uint64_t id, uint64_t holder)
{
    applier_hurry_end(l->applier);
    lease_release(l, id, NULL);
    pthread_mutex_lock(&l->mu);
    note_busy_now(l, holder);
    pthread_mutex_unlock(&l->mu);
}

int lease_acquire(struct ext_lease *l, uint64_t holder, bool one_try,
                  uint64_t *out_id, char *why, size_t why_len)
{
    struct lease_waiter me, **pp;
    uint64_t id = 0, until, limit, patient_until, moved_at, entered, kept;
    uint64_t queue_wait_ms, catchup_ms;
    bool passed = false;
    raft_index grant_index = 0, seen;
    bool waited = false, leaderless = false;
    int rc;

    if (holder == 0) {
        lease_core_say(why, why_len, "a lease holder token must not be 0");
        return RAFT_INVALID;
    }
    if (atomic_load(&l->stalled)) {
        /* Refused at once: a lease held while this node cannot catch up
         * would hold every writer of the cluster back. */
        lease_core_say(why, why_len, EXT__LEASE_STALLED);
        return RAFT_NOSPACE;
    }
    if (say_removed(l, why, why_len)) {
        /* Refused at once: it would wait for entries that never come. */
        return RAFT_NOTFOUND;
    }
    me.next = NULL;
    me.holder = holder;
    cond_init(&me.cond);
    pthread_mutex_lock(&l->mu);
    entered = until = now_ms();
    kept = kept_ticket(l, holder, until);
    queue_wait_ms = queue_ms(kept);
    me.ticket = ticket_of(l, kept);
    enqueue(l, &me);
    patient_until = until + l->core.exec_timeout_ms;
    until += queue_wait_ms;
    /* How long the catch-up may see nothing applied while the grant's
     * entries are not committed here. */
    catchup_ms = one_try ? l->core.exec_timeout_ms
                 : queue_wait_ms == EXT__LEASE_QUEUE_MS
                     ? EXT__LEASE_CATCHUP_MS
                     : EXT__LEASE_AGAIN_CATCHUP_MS;
    for (;;) {
        struct timespec ts;
        uint64_t now, wait = 10;
        leaderless = false;
        if (l->queue == &me) {
            rc = ask(l, holder, &id, &grant_index, why, why_len);
            if (rc != RAFT_BUSY) {
                break;
            }
            leaderless = lease_core_ask_leaderless(&l->core);
            /* Held by another connection of this node (or its commit's
             * hold not over): woken by the release; held elsewhere, or
             * no leader yet: asked again shortly. */
            if (l->core.state == LEASE_NONE && l->core.hold_id == 0) {
                wait = one_try && leaderless ? EXT__LEASE_LEADERLESS_RETRY_MS
                                             : EXT__LEASE_RETRY_MS;
            }
        } else {
            rc = RAFT_BUSY;
            lease_core_say(why, why_len,
                           "another writer of this node waits for the "
                           "write lease first");
        }
        waited = true;
        now = now_ms();
        /* A busy handler's retry waits briefly (queue_ms), but one that
         * a writer who came after it passed while it slept waits for its
         * turn: the lease is let go to the first in line, this writer
         * (the writers of a node in turn, first come first served; with
         * 20 ms at each retry, a writer behind holders of more than
         * 20 ms found the lease taken at every retry, and met
         * SQLITE_BUSY while the others wrote). A writer that only waits
         * for one that came before it keeps the brief wait: SQLite's
         * busy timeout counts only the handler's own sleeps. */
        if (!passed && passed_over(l, &me)) {
            passed = true;
            if (until < entered + EXT__LEASE_QUEUE_MS) {
                until = entered + EXT__LEASE_QUEUE_MS;
            }
        }
        /* No leader: no other commit either, so one try waits longer. */
        limit = one_try && leaderless ? patient_until : until;
        if (now >= limit) {
            break;
        }
        /* The first waits a retry's time at most; the others until they
         * are first (woken by the one before them) or give up. */
        deadline_ts(&ts,
                    l->queue == &me && now + wait < limit ? now + wait : limit);
        pthread_cond_timedwait(&me.cond, &l->mu, &ts);
    }
    for (pp = &l->queue; *pp != &me; pp = &(*pp)->next) {
    }
    *pp = me.next;
    note_busy(l, holder, me.ticket, now_ms(), rc == RAFT_BUSY);
    l->n_waits += waited;
    l->n_busy += rc == RAFT_BUSY;
    if (rc == 0) {
        l->n_holds++;
        l->hold_id = id;
        l->hold_ticket = me.ticket;
        l->hold_since_ms = now_ms();
    }
    if (rc != 0) {
        wake_queue(l, false); /* the next in the queue asks */
    }
    /* Granted: the next in the queue could only be refused until this
     * writer's release (or the end of its lease) wakes it, so it sleeps
     * on: a wake now would cost two thread switches and a turn on mu per
     * plain commit, and contend with this writer's own calls. */
    pthread_mutex_unlock(&l->mu);
    pthread_cond_destroy(&me.cond);
    if (rc != 0) {
        return rc;
    }
    /* The transaction must read the latest committed state: this node's
     * own work, the entries up to the grant's index applied here (a
     * follower's at once, not at its follower_apply_ms pace). */
    until = now_ms() + l->core.exec_timeout_ms;
    moved_at = now_ms();
    seen = applier_applied(l->applier);
    applier_hurry_begin(l->applier);
    for (;;) {
        bool in_force;
        uint64_t now, applied;
        if (applier_wait_applied(l->applier, grant_index, 10)) {
            break;
        }
        now = now_ms();
        applied = applier_applied(l->applier);
        if (applied != seen) {
            seen = applied;
            moved_at = now;
        }
        pthread_mutex_lock(&l->mu);
        in_force = lease_core_in_force(&l->core, id, why, why_len);
        pthread_mutex_unlock(&l->mu);
        if (!in_force) {
            catchup_busy(l, id, holder);
            return RAFT_BUSY;
        }
        if (atomic_load(&l->stalled)) {
            applier_hurry_end(l->applier);
            lease_release(l, id, NULL);
            lease_core_say(why, why_len, EXT__LEASE_STALLED);
            return RAFT_NOSPACE;
        }
        if (say_removed(l, why, why_len)) {
            applier_hurry_end(l->applier);
            lease_release(l, id, NULL);
            return RAFT_NOTFOUND;
        }
        if (now >= until || (now - moved_at >= catchup_ms &&
                             applier_committed(l->applier) < grant_index)) {
            catchup_busy(l, id, holder);
            if (now >= until) {
                lease_core_say(why, why_len,
                               "this node applied %llu of the leader's %llu "
                               "entries within exec_timeout_ms (%u ms)",
                               (unsigned long long)seen,
                               (unsigned long long)grant_index,
                               l->core.exec_timeout_ms);
            } else {
                lease_core_say(why, why_len,
                               "this node applied %llu of the leader's %llu "
                               "entries, and none for %llu ms: they are not "
                               "committed (no quorum?)",
                               (unsigned long long)seen,
                               (unsigned long long)grant_index,
                               (unsigned long long)catchup_ms);
            }
            return RAFT_BUSY;
        }
    }
    applier_hurry_end(l->applier);
    *out_id = id;
    return 0;
}

/* wait_commit waits for the loop's answer to the queued commit until
 * @until (ms), asking @probe every EXT_EXEC_POLL_MS. Returns whether
 * @probe said the caller was interrupted. Caller holds mu. */
static bool wait_commit(struct ext_lease *l, uint64_t until,
                        const struct ext_exec_probe *probe)
{
    bool interrupted = false;

    while (lease_core_commit_waiting(&l->core)) {
        uint64_t now = now_ms(), next = now + EXT_EXEC_POLL_MS;
        struct timespec ts;
        if (now >= until) {
            break;
        }
        deadline_ts(&ts, next < until ? next : until);
        pthread_cond_timedwait(&l->cond, &l->mu, &ts);
        if (l->core.commit == COMMIT_DONE || probe == NULL ||
            probe->interrupted == NULL) {
            continue;
        }
        pthread_mutex_unlock(&l->mu);
        interrupted = probe->interrupted(probe->data);
        pthread_mutex_lock(&l->mu);
        if (interrupted) {
            break;
        }
    }
    return interrupted;
}

/* pass_copy_gate lets this node's holder whose entry @index committed go
 * on to commit it to the file, once no copy of the file is beginning
 * (lease_copy_begin), and notes it as landed. A copy holds the gate for
 * milliseconds; exec_timeout_ms bounds the wait all the same. Caller
 * holds mu. */
static void pass_copy_gate(struct ext_lease *l, raft_index index)
{
    uint64_t until = now_ms() + l->core.exec_timeout_ms;
    struct timespec ts;

    deadline_ts(&ts, until);
    while (l->copying > 0 && now_ms() < until) {
        pthread_cond_timedwait(&l->copy_cond, &l->mu, &ts);
    }
    if (index > l->landed) {
        l->landed = index;
    }
}

raft_index lease_copy_begin(struct ext_lease *l)
{
    raft_index landed;

    pthread_mutex_lock(&l->mu);
    l->copying++;
    landed = l->landed;
    pthread_mutex_unlock(&l->mu);
    return landed;
}

void lease_copy_end(struct ext_lease *l)
{
    pthread_mutex_lock(&l->mu);
    if (l->copying > 0) {
        l->copying--;
    }
    if (l->copying == 0) {
        pthread_cond_broadcast(&l->copy_cond);
    }
    pthread_mutex_unlock(&l->mu);
}

int lease_commit(struct ext_lease *l, uint64_t id, const void *p, size_t len,
                 const struct ext_exec_probe *probe,
                 const unsigned char *locked, char *why, size_t why_len)
{
    struct lease_core_out out;
    struct raft_buf *buf;
    bool interrupted;
    int rc;

    if (p == NULL || !sql_changeset_is(p, len)) {
        lease_release(l, id, NULL);
        lease_core_say(why, why_len,
                       "not applied: the payload is no changeset");
        return RAFT_INVALID;
    }
    if (locked != NULL && l->applier != NULL &&
        !applier_wal_base_is(l->applier, locked)) {
        /* Sent, every other replica would find rows in a state only
         * this file has, and refuse the entry: each one diverged. */
        lease_release(l, id, NULL);
        lease_core_say(
            why, why_len,
            "not applied: another connection committed to this node's "
            "file before the transaction took its write lock (a process "
            "that did not load raftsql, or a checkpoint with TRUNCATE: "
            "the file's WAL-index header is not the one the node last "
            "read of it holding only its own commits), so the transaction "
            "may have read a state no other replica has, and was not "
            "sent; the node checks its replica (raft_status() diverged, "
            "then repaired from a peer): run the transaction again");
        return RAFT_DIVERGED;
    }
    if (len > l->core.max_bytes) {
        lease_release(l, id, NULL);
        lease_core_say(why, why_len,
                       "not applied: a transaction of %zu bytes exceeds "
                       "max_request_bytes (%llu)",
                       len, (unsigned long long)l->core.max_bytes);
        return RAFT_TOOBIG;
    }
    buf = raft_buf_copy(p, len);
    if (buf == NULL) {
        lease_release(l, id, NULL);
        lease_core_say(why, why_len, "not applied: out of memory");
        return RAFT_NOMEM;
    }
    pthread_mutex_lock(&l->mu);
    lease_core_out_init(&out);
    rc = lease_core_commit(&l->core, id, buf, why, why_len, &out);
    carry_out(l, &out, NULL);
    if (rc != 0) {
        pthread_mutex_unlock(&l->mu);
        raft_buf_unref(buf);
        return rc;
    }
    interrupted = wait_commit(l, now_ms() + l->core.exec_timeout_ms, probe);
    lease_core_out_init(&out);
    rc = lease_core_commit_end(&l->core, id, interrupted, now_ms(), why,
                               why_len, &out);
    carry_out(l, &out, NULL);
    if (rc == 0) {
        pass_copy_gate(l, l->core.done_index);
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void lease_release(struct ext_lease *l, uint64_t id,
                   const struct sql_wal_marks *marks)
{
    struct lease_core_out out;
    raft_index wait_for = 0;

    pthread_mutex_lock(&l->mu);
    if (id != 0 && id == l->hold_id) {
        raft_histogram_observe(&l->hold_seconds,
                               (double)(now_ms() - l->hold_since_ms) / 1e3);
        l->hold_id = 0;
    }
    lease_core_out_init(&out);
    lease_core_release(&l->core, id, &wait_for, &out);
    carry_out(l, &out, marks);
    ask_for_first(l);
    wake_queue(l, false); /* the first writer queued takes the answer */
    pthread_mutex_unlock(&l->mu);
    /* The holder's COMMIT returns once this node applied its entry (the
     * applier only records it: the file holds it by the holder's own
     * commit), so its next transaction's snapshot is not made stale by
     * that record, and reads after it see the applied index. */
    if (wait_for == 0) {
        return;
    }
    applier_hurry_begin(l->applier);
    (void)applier_wait_applied(l->applier, wait_for, l->core.exec_timeout_ms);
    applier_hurry_end(l->applier);
}

bool lease_holds_back(struct ext_lease *l)
{
    bool held;
    if (!atomic_load(&l->active)) {
        return false;
    }
    pthread_mutex_lock(&l->mu);
    held = lease_core_holds_back(&l->core);
    pthread_mutex_unlock(&l->mu);
    return held;
}

int lease_end(struct ext_lease *l, char *msg, size_t msg_len)
{
    struct lease_core_out out;
    char what[300] = "";
    bool ended;

    pthread_mutex_lock(&l->mu);
    lease_core_out_init(&out);
    ended = lease_core_end(&l->core, now_ms(), what, sizeof what, &out);
    carry_out(l, &out, NULL);
    wake_queue(l, false); /* the first writer queued for the lease asks */
    pthread_mutex_unlock(&l->mu);
    if (!ended) {
        lease_core_say(msg, msg_len,
                       "no write lease this node granted is in force");
        return RAFT_NOTFOUND;
    }
    lease_core_say(msg, msg_len, "ended: %s", what);
    return 0;
}

void lease_view(struct ext_lease *l, struct ext_lease_view *out)
{
    unsigned queued = 0;

    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&l->mu);
    for (const struct lease_waiter *w = l->queue; w != NULL; w = w->next) {
        queued++;
    }
    out->queued = queued;
    out->n_holds = l->n_holds;
    out->n_waits = l->n_waits;
    out->n_busy = l->n_busy;
    out->hold_seconds = l->hold_seconds;
    if (l->core.state == LEASE_GRANTED) {
        out->in_force = true;
        out->holder = l->core.holder;
        out->server = l->core.holder_server;
        out->id = l->core.id;
        out->age_ms = now_ms() - l->core.granted_ms;
    }
    out->held = l->core.hold_id != 0;
    out->n_line = lease_core_line(&l->core, now_ms(), out->line, out->line_ms,
                                  RAFT_MAX_SERVERS);
    pthread_mutex_unlock(&l->mu);
}

void lease_shutdown(struct ext_lease *l)
{
    struct lease_core_out out;

    pthread_mutex_lock(&l->mu);
    lease_core_out_init(&out);
    lease_core_shutdown(&l->core, &out);
    carry_out(l, &out, NULL);
    wake_queue(l, true); /* each is told the node stops */
    pthread_mutex_unlock(&l->mu);
}

/* ---- The loop ------------------------------------------------------------ */

void lease_on_loop(struct ext_lease *l, struct raft_uv_node *d)
{
    struct lease_core_env env;
    struct lease_core_out out;

    bool stalled = raft_uv_node_log_full(d) || raft_uv_node_failed(d) ||
                   raft_storage_stalled(raft_uv_node_core(d));

    if (!atomic_load(&l->active)) {
        atomic_store(&l->stalled, stalled);
        return;
    }
    pthread_mutex_lock(&l->mu);
    atomic_store(&l->stalled,
                 stalled || (l->applier != NULL && applier_failed(l->applier)));
    loop_env(l, d, &env);
    lease_core_out_init(&out);
    lease_core_loop(&l->core, &env, &out);
    carry_out(l, &out, NULL);
    if (out.propose != NULL) {
        /* Appended without the mutex: the step calls back into the
         * node. */
        struct raft_buf *buf = out.propose;
        uint64_t seq = out.propose_seq;
        raft_index index = 0;
        raft_term term = 0;
        int rc;

        pthread_mutex_unlock(&l->mu);
        rc = raft_uv_node_propose(d, &buf, 1, &index, &term);
        raft_buf_unref(buf);
        pthread_mutex_lock(&l->mu);
        loop_env(l, d, &env);
        lease_core_out_init(&out);
        lease_core_proposed(&l->core, &env, seq, rc, index, term, &out);
        carry_out(l, &out, NULL);
    }
    loop_env(l, d, &env);
    lease_core_out_init(&out);
    lease_core_loop_end(&l->core, &env, &out);
    carry_out(l, &out, NULL);
    pthread_mutex_unlock(&l->mu);
}

bool lease_is_frame(const struct raft_frame *f)
{
    return f->type == RAFT_FRAME_LEASE || f->type == RAFT_FRAME_LEASE_RESULT;
}

void lease_on_frame(struct ext_lease *l, struct raft_uv_node *d,
                    const struct raft_frame *f)
{
    struct lease_core_env env;
    struct lease_core_out out;
    bool changeset_ok = false, propose_now;

    if (f->type == RAFT_FRAME_LEASE && f->lease.op == RAFT_LEASE_COMMIT &&
        f->lease.data != NULL) {
        changeset_ok =
            sql_changeset_is(f->lease.data->data, f->lease.data->len);
    }
    pthread_mutex_lock(&l->mu);
    loop_env(l, d, &env);
    lease_core_out_init(&out);
    propose_now = lease_core_frame(&l->core, &env, f, changeset_ok, &out);
    carry_out(l, &out, NULL);
    pthread_mutex_unlock(&l->mu);
    if (propose_now) {
        lease_on_loop(l, d);
    }
    raft_uv_node_wake(d); /* requests held back may go */
}
