/* The write lease (lease.h): its grant, the changeset's proposal under
 * it, the commit wait, the applier hold, and their ends.
 *
 * Happy path: lease_acquire marks the lease ASKED and wakes the loop;
 * lease_on_loop grants it (GRANTED, the applier held above the leader's
 * last index G) and the holder waits until G is applied here;
 * lease_commit queues the changeset (QUEUED) and wakes the loop, which
 * checks the lease and appends it unstamped as entry G + 1 (TAKEN while
 * it proposes outside the mutex, then PROPOSED; the lease ends); each
 * later step checks the commit index, and the holder returns once it
 * reaches G + 1; lease_release ends the applier hold.
 * Failure modes: no leader, a follower, a member on an old wire, another
 * holder: refused at once. The lease expires (lease_timeout_ms after the
 * grant) or a leader change ends it: a queued commit is refused, not
 * applied; a proposed one answers outcome unknown when the leadership is
 * lost before its commit is seen. A commit the loop does not take within
 * exec_timeout_ms is withdrawn (not applied); one taken but not seen
 * committed by then is outcome unknown. A holder that never releases:
 * the hold ends lease_timeout_ms after the grant or the commit's
 * return. */

#include "lease.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../sql/changeset.h"
#include "wire_gate.h"

SQLITE_EXTENSION_INIT3

/* Where the lease stands. */
enum {
    LEASE_NONE = 0,    /* none out */
    LEASE_ASKED = 1,   /* a holder waits for the loop's answer */
    LEASE_GRANTED = 2, /* in force: requests are held back */
};

/* Where the holder's commit stands. */
enum {
    COMMIT_NONE = 0,     /* no commit waits */
    COMMIT_QUEUED = 1,   /* waits for the loop (may be withdrawn) */
    COMMIT_TAKEN = 2,    /* the loop proposes it now */
    COMMIT_PROPOSED = 3, /* appended at index/pterm: waits for the commit */
    COMMIT_DONE = 4,     /* answered: commit_rc, commit_why */
};

struct ext_lease {
    raft_id self;                /* this server */
    unsigned timeout_ms;         /* lease_timeout_ms */
    unsigned exec_timeout_ms;    /* a holder's longest wait */
    uint64_t max_bytes;          /* max_request_bytes */
    struct raft_uv_node *driver; /* set by lease_attach */
    struct ext_applier *applier; /* set by lease_attach */
    pthread_mutex_t mu;          /* guards every field below */
    pthread_cond_t cond;         /* an ask or a commit was answered */
    atomic_bool active;          /* anything is out (the loop's fast path:
                                     written under mu) */
    bool shutdown;               /* no new leases, no wakes */
    uint64_t n_grants;           /* grants of this node's life */
    int state;                   /* LEASE_* */
    uint64_t holder;             /* the holder's token (ASKED, GRANTED) */
    uint64_t id;                 /* the lease id (GRANTED) */
    raft_index grant_index;      /* the leader's last index at the grant */
    uint64_t done_id;            /* the last lease whose changeset
                                    committed, 0 */
    raft_index done_index;       /* that changeset's index (its release
                                    waits until this node applied it) */
    raft_term term;              /* the term of the grant */
    uint64_t granted_ms;         /* CLOCK_MONOTONIC ms of the grant */
    int ask_rc;                  /* the loop's answer to an ask */
    char ask_why[256];           /* why not */
    uint64_t ended_id;           /* the lease that ended last */
    int ended_rc;                /* its end, as a commit's code */
    char ended_why[200];         /* and words */
    int commit;                  /* COMMIT_* */
    uint64_t commit_seq;         /* counts commits (a loop's proposal
                                     finds its own) */
    struct raft_buf *payload;    /* the changeset (QUEUED, TAKEN) */
    raft_index index;            /* where it was appended (PROPOSED) */
    raft_term pterm;             /* in this term */
    int commit_rc;               /* DONE: the answer */
    char commit_why[256];        /* its words */
    uint64_t hold_id;            /* the lease holding the applier, 0 */
    uint64_t hold_deadline_ms;   /* the hold ends by itself then */
    raft_index landed;           /* the changeset the hold's lease
                                     proposed, 0 */
};

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

static void say(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    if (why == NULL || why_len == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

/* note_active keeps the loop's fast path true. Caller holds mu. */
static void note_active(struct ext_lease *l)
{
    atomic_store(&l->active, l->state != LEASE_NONE ||
                                 l->commit != COMMIT_NONE || l->hold_id != 0);
}

/* end_lease ends the lease in force with @rc and @fmt's words, what a
 * commit under it is answered. Caller holds mu. */
static void end_lease(struct ext_lease *l, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void end_lease(struct ext_lease *l, int rc, const char *fmt, ...)
{
    va_list ap;
    if (l->state != LEASE_GRANTED) {
        return;
    }
    l->state = LEASE_NONE;
    l->ended_id = l->id;
    l->ended_rc = rc;
    va_start(ap, fmt);
    vsnprintf(l->ended_why, sizeof l->ended_why, fmt, ap);
    va_end(ap);
    note_active(l);
}

/* end_hold lets the applier go. Caller holds mu. */
static void end_hold(struct ext_lease *l)
{
    if (l->hold_id == 0) {
        return;
    }
    applier_lease_end(l->applier, l->landed);
    l->hold_id = 0;
    l->landed = 0;
    note_active(l);
}

/* wake wakes the loop, unless the node stops. Caller holds mu. */
static void wake(struct ext_lease *l)
{
    if (!l->shutdown && l->driver != NULL) {
        raft_uv_node_wake(l->driver);
    }
}

int lease_new(raft_id self, unsigned lease_timeout_ms, unsigned exec_timeout_ms,
              uint64_t max_bytes, struct ext_lease **out)
{
    struct ext_lease *l = calloc(1, sizeof *l);
    pthread_condattr_t ca;

    if (l == NULL) {
        return RAFT_NOMEM;
    }
    l->self = self;
    l->timeout_ms = lease_timeout_ms;
    l->exec_timeout_ms = exec_timeout_ms;
    l->max_bytes = max_bytes;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cond, &ca);
    pthread_condattr_destroy(&ca);
    *out = l;
    return 0;
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
    raft_buf_unref(l->payload);
    pthread_cond_destroy(&l->cond);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* ---- The holder (host threads) ------------------------------------------ */

/* describe_holder writes who holds the lease into @why. Caller holds
 * mu. */
static void describe_holder(struct ext_lease *l, char *why, size_t why_len)
{
    if (l->state == LEASE_GRANTED) {
        say(why, why_len,
            "the write lease is held by connection %llu (lease %llu, for "
            "%llu ms)",
            (unsigned long long)l->holder, (unsigned long long)l->id,
            (unsigned long long)(now_ms() - l->granted_ms));
    } else if (l->state == LEASE_ASKED) {
        say(why, why_len, "the write lease is being granted to connection %llu",
            (unsigned long long)l->holder);
    } else {
        say(why, why_len,
            "the write lease's last holder (lease %llu) has not finished "
            "its commit yet",
            (unsigned long long)l->hold_id);
    }
}

/* ask asks the loop for the lease for @holder and waits for its answer.
 * Returns 0 with the lease GRANTED to @holder, or a refusal. Caller
 * holds mu. */
static int ask(struct ext_lease *l, uint64_t holder, char *why, size_t why_len)
{
    struct timespec until;

    if (l->shutdown) {
        say(why, why_len, "the node is stopping");
        return RAFT_SHUTDOWN;
    }
    if (l->state != LEASE_NONE || l->hold_id != 0) {
        describe_holder(l, why, why_len);
        return RAFT_BUSY;
    }
    if (l->driver == NULL) {
        say(why, why_len, "the node is starting");
        return RAFT_BUSY;
    }
    l->state = LEASE_ASKED;
    l->holder = holder;
    note_active(l);
    wake(l);
    deadline_ts(&until, now_ms() + l->exec_timeout_ms);
    while (l->state == LEASE_ASKED && !l->shutdown) {
        if (pthread_cond_timedwait(&l->cond, &l->mu, &until) != 0) {
            break;
        }
    }
    if (l->state == LEASE_ASKED) {
        l->state = LEASE_NONE;
        note_active(l);
        if (l->shutdown) {
            say(why, why_len, "the node is stopping");
            return RAFT_SHUTDOWN;
        }
        say(why, why_len,
            "the node's loop did not answer within exec_timeout_ms (%u ms)",
            l->exec_timeout_ms);
        return RAFT_BUSY;
    }
    if (l->ask_rc != 0) {
        say(why, why_len, "%s", l->ask_why);
        return l->ask_rc;
    }
    return 0;
}

int lease_acquire(struct ext_lease *l, uint64_t holder, uint64_t *out_id,
                  char *why, size_t why_len)
{
    uint64_t id, until;
    raft_index grant_index;
    int rc;

    if (holder == 0) {
        say(why, why_len, "a lease holder token must not be 0");
        return RAFT_INVALID;
    }
    pthread_mutex_lock(&l->mu);
    rc = ask(l, holder, why, why_len);
    id = l->id;
    grant_index = l->grant_index;
    pthread_mutex_unlock(&l->mu);
    if (rc != 0) {
        return rc;
    }
    /* The transaction must read the latest committed state: this node's
     * own work, the entries up to the grant's index applied here. */
    until = now_ms() + l->exec_timeout_ms;
    for (;;) {
        struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000L};
        bool in_force;
        if (applier_applied(l->applier) >= grant_index) {
            break;
        }
        pthread_mutex_lock(&l->mu);
        in_force = l->state == LEASE_GRANTED && l->id == id;
        if (!in_force) {
            say(why, why_len, "%s", l->ended_why);
        }
        pthread_mutex_unlock(&l->mu);
        if (!in_force) {
            lease_release(l, id);
            return RAFT_BUSY;
        }
        if (now_ms() >= until) {
            lease_release(l, id);
            say(why, why_len,
                "this node applied %llu of the leader's %llu entries within "
                "exec_timeout_ms (%u ms)",
                (unsigned long long)applier_applied(l->applier),
                (unsigned long long)grant_index, l->exec_timeout_ms);
            return RAFT_BUSY;
        }
        nanosleep(&ms, NULL);
    }
    *out_id = id;
    return 0;
}

/* refuse_commit words why lease @id takes no commit. Caller holds mu. */
static int refuse_commit(struct ext_lease *l, uint64_t id, char *why,
                         size_t why_len)
{
    if (l->shutdown) {
        say(why, why_len, "not applied: the node is stopping");
        return RAFT_SHUTDOWN;
    }
    if (id != 0 && id == l->ended_id) {
        say(why, why_len, "not applied: %s", l->ended_why);
        return l->ended_rc;
    }
    say(why, why_len, "not applied: lease %llu is not in force",
        (unsigned long long)id);
    return RAFT_INVALID;
}

/* wait_commit waits for the loop's answer to the queued commit until
 * @until (ms), asking @probe every EXT_EXEC_POLL_MS. Returns the answer,
 * its words in @why. Caller holds mu. */
static int wait_commit(struct ext_lease *l, uint64_t until,
                       const struct ext_exec_probe *probe, char *why,
                       size_t why_len)
{
    bool interrupted = false;

    while (l->commit != COMMIT_DONE && !l->shutdown) {
        uint64_t now = now_ms(), next = now + EXT_EXEC_POLL_MS;
        struct timespec ts;
        if (now >= until) {
            break;
        }
        deadline_ts(&ts, next < until ? next : until);
        pthread_cond_timedwait(&l->cond, &l->mu, &ts);
        if (l->commit == COMMIT_DONE || probe == NULL ||
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
    if (l->commit == COMMIT_DONE) {
        say(why, why_len, "%s", l->commit_why);
        return l->commit_rc;
    }
    if (l->commit == COMMIT_QUEUED) {
        /* The loop never took it: withdrawn, nothing appended. */
        end_lease(l, RAFT_CANCELED, "its commit was withdrawn");
        if (interrupted) {
            say(why, why_len, "interrupted: not applied");
            return RAFT_CANCELED;
        }
        if (l->shutdown) {
            say(why, why_len, "not applied: the node is stopping");
            return RAFT_SHUTDOWN;
        }
        say(why, why_len,
            "not applied: the leader's loop did not take the changeset "
            "within exec_timeout_ms (%u ms)",
            l->exec_timeout_ms);
        return RAFT_TIMEOUT;
    }
    say(why, why_len,
        "%soutcome unknown: %s; the transaction will be applied on all "
        "nodes or on none",
        interrupted ? "interrupted: " : "",
        interrupted   ? "the caller gave up after the entry was proposed"
        : l->shutdown ? "the node is stopping"
                      : "no commit seen within exec_timeout_ms");
    return RAFT_UNKNOWN;
}

int lease_commit(struct ext_lease *l, uint64_t id, const void *p, size_t len,
                 const struct ext_exec_probe *probe, char *why, size_t why_len)
{
    struct raft_buf *buf;
    uint64_t now;
    int rc;

    if (p == NULL || !sql_changeset_is(p, len)) {
        lease_release(l, id);
        say(why, why_len, "not applied: the payload is no changeset");
        return RAFT_INVALID;
    }
    if (len > l->max_bytes) {
        lease_release(l, id);
        say(why, why_len,
            "not applied: a transaction of %zu bytes exceeds "
            "max_request_bytes (%llu)",
            len, (unsigned long long)l->max_bytes);
        return RAFT_TOOBIG;
    }
    buf = raft_buf_copy(p, len);
    if (buf == NULL) {
        lease_release(l, id);
        say(why, why_len, "not applied: out of memory");
        return RAFT_NOMEM;
    }
    pthread_mutex_lock(&l->mu);
    if (l->shutdown || l->state != LEASE_GRANTED || l->id != id ||
        l->commit != COMMIT_NONE) {
        rc = refuse_commit(l, id, why, why_len);
        if (l->state == LEASE_GRANTED && l->id == id) {
            end_lease(l, rc, "its commit was refused");
        }
        pthread_mutex_unlock(&l->mu);
        raft_buf_unref(buf);
        return rc;
    }
    l->commit = COMMIT_QUEUED;
    l->commit_seq++;
    l->payload = buf;
    note_active(l);
    wake(l);
    rc = wait_commit(l, now_ms() + l->exec_timeout_ms, probe, why, why_len);
    if (rc == 0) {
        l->done_id = id;
        l->done_index = l->grant_index + 1;
    }
    /* The lease ends with the call, whatever the outcome; the hold stays
     * until the holder's release (or lease_timeout_ms from now). */
    if (l->state == LEASE_GRANTED && l->id == id) {
        end_lease(l, RAFT_INVALID, "its commit ended it");
    }
    l->commit = COMMIT_NONE;
    raft_buf_unref(l->payload);
    l->payload = NULL;
    now = now_ms();
    if (l->hold_id == id) {
        l->hold_deadline_ms = now + l->timeout_ms;
    }
    note_active(l);
    wake(l);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void lease_release(struct ext_lease *l, uint64_t id)
{
    raft_index wait_for = 0;
    uint64_t until;

    pthread_mutex_lock(&l->mu);
    if (id != 0 && l->done_id == id) {
        wait_for = l->done_index;
        l->done_id = 0;
    }
    if (l->commit == COMMIT_NONE && id != 0) {
        if (l->state == LEASE_GRANTED && l->id == id) {
            end_lease(l, RAFT_INVALID, "lease %llu was released",
                      (unsigned long long)id);
        }
        if (l->hold_id == id) {
            end_hold(l);
        }
        wake(l); /* requests held back may go */
    }
    pthread_mutex_unlock(&l->mu);
    /* The holder's COMMIT returns once this node applied its entry (the
     * applier only records it: the file holds it by the holder's own
     * commit), so its next transaction's snapshot is not made stale by
     * that record, and reads after it see the applied index. */
    until = now_ms() + l->exec_timeout_ms;
    while (wait_for != 0 && applier_applied(l->applier) < wait_for &&
           now_ms() < until) {
        struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000L};
        nanosleep(&ms, NULL);
    }
}

bool lease_holds_back(struct ext_lease *l)
{
    bool held;
    if (!atomic_load(&l->active)) {
        return false;
    }
    pthread_mutex_lock(&l->mu);
    held = l->state == LEASE_GRANTED;
    pthread_mutex_unlock(&l->mu);
    return held;
}

void lease_view(struct ext_lease *l, struct ext_lease_view *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&l->mu);
    if (l->state == LEASE_GRANTED) {
        out->in_force = true;
        out->holder = l->holder;
        out->id = l->id;
        out->age_ms = now_ms() - l->granted_ms;
    }
    out->held = l->hold_id != 0;
    pthread_mutex_unlock(&l->mu);
}

void lease_shutdown(struct ext_lease *l)
{
    pthread_mutex_lock(&l->mu);
    l->shutdown = true;
    end_lease(l, RAFT_SHUTDOWN, "the node is stopping");
    if (l->commit == COMMIT_TAKEN || l->commit == COMMIT_PROPOSED) {
        l->commit = COMMIT_DONE;
        l->commit_rc = RAFT_UNKNOWN;
        say(l->commit_why, sizeof l->commit_why,
            "outcome unknown: the node is stopping; the transaction will be "
            "applied on all nodes or on none");
    }
    end_hold(l);
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->mu);
}

/* ---- The loop ------------------------------------------------------------ */

/* answer_commit answers the waiting commit with @rc and @fmt's words.
 * Caller holds mu. */
static void answer_commit(struct ext_lease *l, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void answer_commit(struct ext_lease *l, int rc, const char *fmt, ...)
{
    va_list ap;
    l->commit = COMMIT_DONE;
    l->commit_rc = rc;
    va_start(ap, fmt);
    vsnprintf(l->commit_why, sizeof l->commit_why, fmt, ap);
    va_end(ap);
    pthread_cond_broadcast(&l->cond);
}

/* grant answers an ask on the loop of @d. Caller holds mu. */
static void grant(struct ext_lease *l, struct raft_uv_node *d, bool leading,
                  uint64_t now)
{
    const struct raft *core = raft_uv_node_core(d);
    raft_id leader = raft_leader_id(core);

    l->ask_rc = 0;
    if (l->shutdown) {
        l->ask_rc = RAFT_SHUTDOWN;
        say(l->ask_why, sizeof l->ask_why, "the node is stopping");
    } else if (!leading && (leader == 0 || leader == l->self)) {
        l->ask_rc = RAFT_BUSY;
        say(l->ask_why, sizeof l->ask_why, "no leader yet");
    } else if (!leading) {
        l->ask_rc = RAFT_NOTLEADER;
        say(l->ask_why, sizeof l->ask_why,
            "plain SQL writes are served on the leader's node for now "
            "(server %llu leads); on a follower use raft_exec",
            (unsigned long long)leader);
    } else if (wire_gate_changeset(d, l->self, l->ask_why, sizeof l->ask_why) !=
               EXT_WIRE_GATE_OPEN) {
        l->ask_rc = RAFT_FORMAT;
    }
    if (l->ask_rc != 0) {
        l->state = LEASE_NONE;
    } else {
        l->n_grants++;
        l->term = raft_current_term(core);
        l->id = (l->term << 32) | (l->n_grants & 0xffffffffu);
        l->grant_index = raft_last_index(core);
        l->granted_ms = now;
        l->state = LEASE_GRANTED;
        /* The previous hold ended before an ask is taken (ask). */
        l->hold_id = l->id;
        l->landed = 0;
        l->hold_deadline_ms = now + l->timeout_ms;
        applier_lease_hold(l->applier, l->grant_index + 1);
    }
    note_active(l);
    pthread_cond_broadcast(&l->cond);
}

/* take_commit checks the queued commit against the lease in force and
 * returns its payload (a reference) to propose, or NULL when refused
 * (answered). Caller holds mu. */
static struct raft_buf *take_commit(struct ext_lease *l,
                                    const struct raft *core)
{
    if (l->state != LEASE_GRANTED) {
        char why[sizeof l->commit_why];
        int rc = refuse_commit(l, l->ended_id, why, sizeof why);
        answer_commit(l, rc, "%s", why);
        return NULL;
    }
    if (raft_last_index(core) != l->grant_index) {
        end_lease(l, RAFT_NOTLEADER,
                  "the leader appended another entry after the grant (a "
                  "membership change): retry the transaction");
        answer_commit(l, RAFT_NOTLEADER, "not applied: %s", l->ended_why);
        return NULL;
    }
    l->commit = COMMIT_TAKEN;
    return raft_buf_ref(l->payload);
}

/* propose appends @buf, the changeset of commit @seq, through @d (the
 * mutex not held: the step calls back into the node). Caller holds mu,
 * which it gets back. */
static void propose(struct ext_lease *l, struct raft_uv_node *d,
                    struct raft_buf *buf, uint64_t seq)
{
    raft_index index = 0;
    raft_term term = 0;
    int rc;

    pthread_mutex_unlock(&l->mu);
    rc = raft_uv_node_propose(d, &buf, 1, &index, &term);
    raft_buf_unref(buf);
    pthread_mutex_lock(&l->mu);
    if (rc == 0) {
        /* Whatever its holder does now, the applier's hold knows it. */
        if (l->hold_id == l->id) {
            l->landed = index;
        }
        end_lease(l, RAFT_INVALID, "its changeset was proposed");
    } else {
        end_lease(l, rc, "the leader could not append the changeset: %s",
                  raft_strerror(rc));
    }
    if (l->commit != COMMIT_TAKEN || l->commit_seq != seq) {
        return; /* its holder gave up: outcome unknown, told already */
    }
    if (rc == 0) {
        l->commit = COMMIT_PROPOSED;
        l->index = index;
        l->pterm = term;
    } else {
        answer_commit(l, rc, "not applied: %s", l->ended_why);
    }
}

/* check_commit answers a proposed commit once the commit index reaches
 * it, or once the leadership it was proposed in is lost. Caller holds
 * mu. */
static void check_commit(struct ext_lease *l, const struct raft *core,
                         bool leading)
{
    if (l->commit != COMMIT_PROPOSED) {
        return;
    }
    if (!leading || raft_current_term(core) != l->pterm) {
        answer_commit(l, RAFT_UNKNOWN,
                      "outcome unknown: this node stopped leading before "
                      "the entry (index %llu) was seen committed; the "
                      "transaction will be applied on all nodes or on none",
                      (unsigned long long)l->index);
    } else if (raft_commit_index(core) >= l->index) {
        answer_commit(l, 0, "committed at index %llu",
                      (unsigned long long)l->index);
    }
}

void lease_on_loop(struct ext_lease *l, struct raft_uv_node *d)
{
    const struct raft *core;
    bool leading;
    uint64_t now;

    if (!atomic_load(&l->active)) {
        return;
    }
    core = raft_uv_node_core(d);
    leading = raft_role(core) == RAFT_LEADER && !raft_uv_node_failed(d);
    now = now_ms();
    pthread_mutex_lock(&l->mu);
    if (l->state == LEASE_GRANTED &&
        (!leading || raft_current_term(core) != l->term)) {
        end_lease(l, RAFT_NOTLEADER,
                  "a leader change ended the lease (lease %llu)",
                  (unsigned long long)l->id);
    }
    if (l->state == LEASE_GRANTED && l->commit != COMMIT_TAKEN &&
        now >= l->granted_ms + l->timeout_ms) {
        end_lease(l, RAFT_TIMEOUT,
                  "the lease expired after lease_timeout_ms (%u ms)",
                  l->timeout_ms);
        if (l->commit == COMMIT_NONE) {
            end_hold(l); /* its holder wrote nothing that counts */
        }
    }
    if (l->state == LEASE_ASKED) {
        grant(l, d, leading, now);
    }
    if (l->commit == COMMIT_QUEUED) {
        struct raft_buf *buf = take_commit(l, core);
        if (buf != NULL) {
            propose(l, d, buf, l->commit_seq);
            core = raft_uv_node_core(d);
            leading = raft_role(core) == RAFT_LEADER && !raft_uv_node_failed(d);
        }
    }
    check_commit(l, core, leading);
    if (l->hold_id != 0 && l->state != LEASE_GRANTED &&
        l->commit == COMMIT_NONE && now >= l->hold_deadline_ms) {
        end_hold(l); /* its holder never released it */
    }
    note_active(l);
    pthread_mutex_unlock(&l->mu);
}
