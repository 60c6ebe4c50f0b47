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

#include "../../raft/message.h"
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

/* A follower's ask or commit unanswered this long goes again (a lost
 * frame: the connection broke), ms. */
#define EXT__LEASE_RESEND_MS 200

/* Outcomes of the leases this leader granted to followers that it
 * remembers, for a resent COMMIT (its answer lost, or the follower not
 * sure it arrived): the latest ones. */
#define EXT__LEASE_DONE 32

/* What became of a lease granted to a follower. */
struct lease_done {
    raft_id from;     /* the holder's server, 0: a free slot */
    uint64_t id;      /* the lease */
    int rc;           /* its commit's answer: 0 (committed at @index),
                         RAFT_UNKNOWN, or why nothing was appended */
    raft_index index; /* where it committed */
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
    raft_id holder_server;       /* GRANTED: the holder's server: self,
                                    or a follower this leader granted */
    raft_id granted_by;          /* GRANTED: the server that granted it:
                                    self, or the leader (a follower's
                                    holder's lease) */
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
    uint64_t commit_id;          /* the lease the commit is under */
    raft_id commit_from;         /* the holder's server: self, or a
                                    follower (answered by a frame) */
    uint64_t commit_tag;         /* a follower's commit: its tag */
    bool commit_remote;          /* this node's holder's commit went to
                                    the leader commit_to (PROPOSED: sent
                                    there, its answer awaited) */
    raft_id commit_to;           /* that leader: the lease's granter */
    uint64_t call_tag;           /* a follower's ask or commit in flight:
                                    its tag (counts from 1) */
    raft_id call_to;             /* where it was last sent, 0: not yet */
    uint64_t call_sent_ms;       /* when */
    uint64_t release_id;         /* a lease whose RELEASE the loop sends
                                    to release_to, 0 */
    raft_id release_to;
    struct lease_done done[EXT__LEASE_DONE]; /* what became of the
                                    latest leases granted to followers:
                                    a resent COMMIT gets the same answer;
                                    one of a lease not among them (this
                                    process never granted it: a restart,
                                    or too long ago) is outcome unknown,
                                    never "not applied" */
    unsigned next_done;                      /* the slot written next */
    bool stalled;              /* this node's log cannot take entries
                                  (disk full, failed): a holder could
                                  not catch up (the loop's view) */
    uint64_t commit_seq;       /* counts commits (a loop's proposal
                                     finds its own) */
    struct raft_buf *payload;  /* the changeset (QUEUED, TAKEN) */
    raft_index index;          /* where it was appended (PROPOSED) */
    raft_term pterm;           /* in this term */
    int commit_rc;             /* DONE: the answer */
    char commit_why[256];      /* its words */
    uint64_t hold_id;          /* the lease holding the applier, 0 */
    uint64_t hold_deadline_ms; /* the hold ends by itself then */
    raft_index landed;         /* the changeset the hold's lease
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
                                 l->commit != COMMIT_NONE || l->hold_id != 0 ||
                                 l->release_id != 0);
}

/* remember keeps what became of lease @id granted to follower @from:
 * @rc (0: committed at @index). Caller holds mu. */
static void remember(struct ext_lease *l, raft_id from, uint64_t id, int rc,
                     raft_index index)
{
    struct lease_done *d = NULL;
    for (unsigned i = 0; i < EXT__LEASE_DONE; i++) {
        if (l->done[i].from == from && l->done[i].id == id) {
            d = &l->done[i];
            break;
        }
    }
    if (d == NULL) {
        d = &l->done[l->next_done];
        l->next_done = (l->next_done + 1) % EXT__LEASE_DONE;
    }
    d->from = from;
    d->id = id;
    d->rc = rc;
    d->index = index;
}

/* recall returns what became of lease @id of follower @from, NULL when
 * this leader does not remember it. Caller holds mu. */
static const struct lease_done *recall(const struct ext_lease *l, raft_id from,
                                       uint64_t id)
{
    for (unsigned i = 0; i < EXT__LEASE_DONE; i++) {
        if (id != 0 && l->done[i].from == from && l->done[i].id == id) {
            return &l->done[i];
        }
    }
    return NULL;
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
    if (l->granted_by == l->self && l->holder_server != l->self &&
        l->commit == COMMIT_NONE) {
        /* A follower's, nothing of it proposed: a COMMIT of it is
         * answered so from now on. */
        remember(l, l->holder_server, l->id, rc, 0);
    }
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
    if (l->state == LEASE_GRANTED && l->holder_server != l->self) {
        say(why, why_len,
            "the write lease is held by a connection of server %llu "
            "(lease %llu, for %llu ms)",
            (unsigned long long)l->holder_server, (unsigned long long)l->id,
            (unsigned long long)(now_ms() - l->granted_ms));
    } else if (l->state == LEASE_GRANTED) {
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
    l->call_tag++;
    l->call_to = 0;
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
        if (l->call_to != 0) {
            say(why, why_len,
                "the leader (server %llu) did not answer the lease ask "
                "within exec_timeout_ms (%u ms)",
                (unsigned long long)l->call_to, l->exec_timeout_ms);
        } else {
            say(why, why_len,
                "the node's loop did not answer within exec_timeout_ms "
                "(%u ms)",
                l->exec_timeout_ms);
        }
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
     * own work, the entries up to the grant's index applied here (a
     * follower's at once, not at its follower_apply_ms pace). */
    until = now_ms() + l->exec_timeout_ms;
    applier_hurry_begin(l->applier);
    for (;;) {
        bool in_force, stalled;
        if (applier_wait_applied(l->applier, grant_index, 10)) {
            break;
        }
        pthread_mutex_lock(&l->mu);
        in_force = l->state == LEASE_GRANTED && l->id == id;
        stalled = l->stalled;
        if (!in_force) {
            say(why, why_len, "%s", l->ended_why);
        }
        pthread_mutex_unlock(&l->mu);
        if (!in_force || stalled) {
            applier_hurry_end(l->applier);
            lease_release(l, id);
            if (stalled) {
                say(why, why_len,
                    "this node's log cannot take entries (disk full, or a "
                    "failed log: raft_status() log_full, log_failed), so it "
                    "cannot catch up for a plain write; it writes again "
                    "once that clears");
                return RAFT_NOSPACE;
            }
            return RAFT_BUSY;
        }
        if (now_ms() >= until) {
            applier_hurry_end(l->applier);
            lease_release(l, id);
            say(why, why_len,
                "this node applied %llu of the leader's %llu entries within "
                "exec_timeout_ms (%u ms)",
                (unsigned long long)applier_applied(l->applier),
                (unsigned long long)grant_index, l->exec_timeout_ms);
            return RAFT_BUSY;
        }
    }
    applier_hurry_end(l->applier);
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
        if (l->state == LEASE_GRANTED && l->granted_by != l->self) {
            l->release_id = l->id;
            l->release_to = l->granted_by;
            wake(l);
        }
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
    l->commit_id = id;
    l->commit_from = l->self;
    l->commit_remote = false;
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

    pthread_mutex_lock(&l->mu);
    if (id != 0 && l->done_id == id) {
        wait_for = l->done_index;
        l->done_id = 0;
    }
    if (l->commit == COMMIT_NONE && id != 0) {
        if (l->state == LEASE_GRANTED && l->id == id &&
            l->holder_server == l->self) {
            if (l->granted_by != l->self) {
                /* The leader ends it at its RELEASE (or at its
                 * lease_timeout_ms, when that frame is lost). */
                l->release_id = id;
                l->release_to = l->granted_by;
            }
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
    if (wait_for == 0) {
        return;
    }
    applier_hurry_begin(l->applier);
    (void)applier_wait_applied(l->applier, wait_for, l->exec_timeout_ms);
    applier_hurry_end(l->applier);
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
        out->server = l->holder_server;
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
    if (l->commit != COMMIT_NONE && l->commit_from != l->self) {
        /* A follower's: it hears no answer, and says outcome unknown. */
        l->commit = COMMIT_NONE;
        raft_buf_unref(l->payload);
        l->payload = NULL;
    } else if (l->commit == COMMIT_TAKEN || l->commit == COMMIT_PROPOSED) {
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

/* send_result sends follower @to the answer to its lease call @tag of
 * @op. Loop thread. */
static void send_result(struct ext_lease *l, struct raft_uv_node *d, raft_id to,
                        uint64_t tag, uint8_t op, int status, uint64_t id,
                        raft_index index, raft_id server)
{
    struct raft_frame f;

    if (raft_uv_node_peer_wire(d, to) <
        raft_frame_type_wire_min(RAFT_FRAME_LEASE_RESULT)) {
        return; /* it asked on a wire we cannot answer on now: it asks
                   again, or its wait ends */
    }
    memset(&f, 0, sizeof f);
    f.type = RAFT_FRAME_LEASE_RESULT;
    f.from = l->self;
    f.to = to;
    f.lease_result.tag = tag;
    f.lease_result.op = op;
    f.lease_result.status = status;
    f.lease_result.id = id;
    f.lease_result.index = index;
    f.lease_result.server = server;
    (void)raft_uv_node_send_frame(d, &f); /* lost: it asks again */
}

/* send_call sends the leader @to this node's holder's lease call: @op
 * with @tag, for @holder or lease @id, with changeset @data (may be
 * NULL). Returns 0, or RAFT_FORMAT when @to's wire version has no LEASE
 * frames (0: not known yet, RAFT_BUSY). Loop thread. */
static int send_call(struct ext_lease *l, struct raft_uv_node *d, raft_id to,
                     uint8_t op, uint64_t tag, uint64_t holder, uint64_t id,
                     struct raft_buf *data)
{
    unsigned wire = raft_uv_node_peer_wire(d, to);
    struct raft_frame f;

    if (wire == 0) {
        return RAFT_BUSY;
    }
    if (wire < raft_frame_type_wire_min(RAFT_FRAME_LEASE)) {
        return RAFT_FORMAT;
    }
    memset(&f, 0, sizeof f);
    f.type = RAFT_FRAME_LEASE;
    f.from = l->self;
    f.to = to;
    f.lease.tag = tag;
    f.lease.op = op;
    f.lease.holder = holder;
    f.lease.id = id;
    f.lease.data = data;
    (void)raft_uv_node_send_frame(d, &f); /* lost: sent again */
    return 0;
}

/* answer_commit answers the waiting commit with @rc and @fmt's words: a
 * holder of this node wakes; a follower's gets a LEASE_RESULT (through
 * @d, NULL: none sent, the node stops) and the commit is over here.
 * Caller holds mu. */
static void answer_commit(struct ext_lease *l, struct raft_uv_node *d, int rc,
                          const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void answer_commit(struct ext_lease *l, struct raft_uv_node *d, int rc,
                          const char *fmt, ...)
{
    va_list ap;
    if (l->commit_from != l->self) {
        remember(l, l->commit_from, l->commit_id, rc, rc == 0 ? l->index : 0);
        if (d != NULL) {
            send_result(l, d, l->commit_from, l->commit_tag, RAFT_LEASE_COMMIT,
                        rc, l->commit_id, rc == 0 ? l->index : 0, 0);
        }
        l->commit = COMMIT_NONE;
        raft_buf_unref(l->payload);
        l->payload = NULL;
        note_active(l);
        return;
    }
    l->commit = COMMIT_DONE;
    l->commit_rc = rc;
    va_start(ap, fmt);
    vsnprintf(l->commit_why, sizeof l->commit_why, fmt, ap);
    va_end(ap);
    pthread_cond_broadcast(&l->cond);
}

/* may_grant says whether this leader may grant a lease now, and when not
 * sets *@rc and @why. Caller holds mu. */
static bool may_grant(struct ext_lease *l, struct raft_uv_node *d, int *rc,
                      char *why, size_t why_len)
{
    *rc = 0;
    if (l->shutdown) {
        *rc = RAFT_SHUTDOWN;
        say(why, why_len, "the node is stopping");
    } else if (wire_gate_changeset(d, l->self, why, why_len) !=
               EXT_WIRE_GATE_OPEN) {
        *rc = RAFT_FORMAT;
    }
    return *rc == 0;
}

/* grant_to makes the lease GRANTED, by this leader, to @holder of
 * @server. Caller holds mu. */
static void grant_to(struct ext_lease *l, const struct raft *core,
                     raft_id server, uint64_t holder, uint64_t now)
{
    l->n_grants++;
    l->term = raft_current_term(core);
    l->id = (l->term << 32) | (l->n_grants & 0xffffffffu);
    l->grant_index = raft_last_index(core);
    l->granted_ms = now;
    l->state = LEASE_GRANTED;
    l->holder = holder;
    l->holder_server = server;
    l->granted_by = l->self;
}

/* hold_from holds the applier above @grant_index for this node's holder
 * of lease @id (the previous hold ended before an ask is taken: ask).
 * Caller holds mu. */
static void hold_from(struct ext_lease *l, uint64_t id, raft_index grant_index,
                      uint64_t now)
{
    l->hold_id = id;
    l->landed = 0;
    l->hold_deadline_ms = now + l->timeout_ms;
    applier_lease_hold(l->applier, grant_index + 1);
}

/* answer_ask ends this node's holder's ask with @rc (0: granted), words
 * in ask_why. Caller holds mu. */
static void answer_ask(struct ext_lease *l, int rc)
{
    l->ask_rc = rc;
    if (rc != 0) {
        l->state = LEASE_NONE;
    }
    note_active(l);
    pthread_cond_broadcast(&l->cond);
}

/* ask_on_loop moves this node's holder's ask: granted here when this
 * node leads, sent to the leader when another leads. Caller holds mu. */
static void ask_on_loop(struct ext_lease *l, struct raft_uv_node *d,
                        bool leading, uint64_t now)
{
    const struct raft *core = raft_uv_node_core(d);
    raft_id leader = raft_leader_id(core);
    int rc;

    if (l->stalled) {
        /* It could not apply up to a grant: refused at once, never a
         * lease held while it tries (every writer would wait on it). */
        say(l->ask_why, sizeof l->ask_why,
            "this node's log cannot take entries (disk full, or a failed "
            "log: raft_status() log_full, log_failed), so it cannot catch "
            "up for a plain write; it writes again once that clears");
        answer_ask(l, RAFT_NOSPACE);
        return;
    }
    if (leading) {
        if (may_grant(l, d, &rc, l->ask_why, sizeof l->ask_why)) {
            grant_to(l, core, l->self, l->holder, now);
            hold_from(l, l->id, l->grant_index, now);
        }
        answer_ask(l, rc);
        return;
    }
    if (l->shutdown) {
        say(l->ask_why, sizeof l->ask_why, "the node is stopping");
        answer_ask(l, RAFT_SHUTDOWN);
        return;
    }
    if (leader == 0 || leader == l->self) {
        say(l->ask_why, sizeof l->ask_why, "no leader yet");
        answer_ask(l, RAFT_BUSY);
        return;
    }
    if (l->call_to == leader && now < l->call_sent_ms + EXT__LEASE_RESEND_MS) {
        return; /* its answer is on its way */
    }
    rc = send_call(l, d, leader, RAFT_LEASE_ASK, l->call_tag, l->holder, 0,
                   NULL);
    if (rc == RAFT_FORMAT) {
        say(l->ask_why, sizeof l->ask_why,
            "the leader (server %llu) speaks wire version %u, which has no "
            "write lease calls (wire version %u and later): plain SQL "
            "writes go through its node only; upgrade it first",
            (unsigned long long)leader, raft_uv_node_peer_wire(d, leader),
            raft_frame_type_wire_min(RAFT_FRAME_LEASE));
        answer_ask(l, RAFT_FORMAT);
        return;
    }
    if (rc == 0) {
        l->call_to = leader;
        l->call_sent_ms = now;
    }
}

/* take_commit checks the queued commit against the lease in force and
 * returns its payload (a reference) to propose, or NULL when refused
 * (answered). Caller holds mu. */
static struct raft_buf *take_commit(struct ext_lease *l, struct raft_uv_node *d,
                                    const struct raft *core)
{
    if (l->state != LEASE_GRANTED || l->id != l->commit_id) {
        char why[sizeof l->commit_why];
        int rc = refuse_commit(l, l->commit_id, why, sizeof why);
        answer_commit(l, d, rc, "%s", why);
        return NULL;
    }
    if (raft_last_index(core) != l->grant_index) {
        end_lease(l, RAFT_NOTLEADER,
                  "the leader appended another entry after the grant (a "
                  "membership change): retry the transaction");
        answer_commit(l, d, RAFT_NOTLEADER, "not applied: %s", l->ended_why);
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
        answer_commit(l, d, rc, "not applied: %s", l->ended_why);
    }
}

/* check_commit answers a commit this leader proposed once the commit
 * index reaches it, or once the leadership it was proposed in is lost.
 * Caller holds mu. */
static void check_commit(struct ext_lease *l, struct raft_uv_node *d,
                         const struct raft *core, bool leading)
{
    if (l->commit != COMMIT_PROPOSED || l->commit_remote) {
        return;
    }
    if (!leading || raft_current_term(core) != l->pterm) {
        answer_commit(l, d, RAFT_UNKNOWN,
                      "outcome unknown: this node stopped leading before "
                      "the entry (index %llu) was seen committed; the "
                      "transaction will be applied on all nodes or on none",
                      (unsigned long long)l->index);
    } else if (raft_commit_index(core) >= l->index) {
        answer_commit(l, d, 0, "committed at index %llu",
                      (unsigned long long)l->index);
    }
}

/* commit_on_loop moves the queued commit: this leader appends it; a
 * follower sends it to the leader that granted the lease (and again
 * while unanswered). Caller holds mu. */
static void commit_on_loop(struct ext_lease *l, struct raft_uv_node *d,
                           uint64_t now)
{
    raft_id to = l->granted_by;

    if (l->commit == COMMIT_QUEUED && l->commit_from == l->self &&
        l->state == LEASE_GRANTED && to != l->self) {
        /* It leaves this node: outcome unknown unless answered. The
         * lease in force here ends; the leader's ends at the append. */
        l->commit = COMMIT_PROPOSED;
        l->commit_remote = true;
        l->call_tag++;
        l->call_to = 0;
        if (l->hold_id == l->id) {
            l->landed = l->grant_index + 1;
        }
        end_lease(l, RAFT_INVALID, "its changeset went to the leader");
        l->commit_to = to;
    }
    if (l->commit == COMMIT_PROPOSED && l->commit_remote &&
        (l->call_to == 0 || now >= l->call_sent_ms + EXT__LEASE_RESEND_MS)) {
        /* Always to the server that granted it: only it can say whether
         * it appended the changeset. */
        if (send_call(l, d, l->commit_to, RAFT_LEASE_COMMIT, l->call_tag, 0,
                      l->commit_id, l->payload) == 0) {
            l->call_to = l->commit_to;
            l->call_sent_ms = now;
        }
        return;
    }
    if (l->commit == COMMIT_QUEUED) {
        struct raft_buf *buf = take_commit(l, d, raft_uv_node_core(d));
        if (buf != NULL) {
            propose(l, d, buf, l->commit_seq);
        }
    }
}

void lease_on_loop(struct ext_lease *l, struct raft_uv_node *d)
{
    const struct raft *core;
    bool leading, ended;
    uint64_t now;

    if (!atomic_load(&l->active)) {
        return;
    }
    core = raft_uv_node_core(d);
    leading = raft_role(core) == RAFT_LEADER && !raft_uv_node_failed(d);
    now = now_ms();
    pthread_mutex_lock(&l->mu);
    l->stalled = raft_uv_node_log_full(d) || raft_uv_node_failed(d) ||
                 raft_storage_stalled(core) || applier_failed(l->applier);
    if (l->release_id != 0) {
        /* Lost or refused: the leader's lease_timeout_ms ends it. */
        (void)send_call(l, d, l->release_to, RAFT_LEASE_RELEASE, 0, 0,
                        l->release_id, NULL);
        l->release_id = 0;
    }
    if (l->state == LEASE_GRANTED) {
        /* A lease this node granted ends when it stops leading; one a
         * leader granted this node's holder, when this node sees a new
         * term (a new leader, maybe this node). */
        ended = l->granted_by == l->self
                    ? !leading || raft_current_term(core) != l->term
                    : leading || raft_current_term(core) != l->term;
        if (ended) {
            end_lease(l, RAFT_NOTLEADER,
                      "a leader change ended the lease (lease %llu)",
                      (unsigned long long)l->id);
        }
    }
    if (l->state == LEASE_GRANTED && l->commit != COMMIT_TAKEN &&
        now >= l->granted_ms + l->timeout_ms) {
        end_lease(l, RAFT_TIMEOUT,
                  "the lease expired after lease_timeout_ms (%u ms)",
                  l->timeout_ms);
        if (l->commit == COMMIT_NONE && l->hold_id == l->id) {
            end_hold(l); /* its holder wrote nothing that counts */
        }
    }
    if (l->state == LEASE_ASKED) {
        ask_on_loop(l, d, leading, now);
    }
    commit_on_loop(l, d, now);
    core = raft_uv_node_core(d);
    leading = raft_role(core) == RAFT_LEADER && !raft_uv_node_failed(d);
    check_commit(l, d, core, leading);
    if (l->hold_id != 0 && l->state != LEASE_GRANTED &&
        l->commit == COMMIT_NONE && now >= l->hold_deadline_ms) {
        end_hold(l); /* its holder never released it */
    }
    note_active(l);
    pthread_mutex_unlock(&l->mu);
}

/* ---- A follower's calls, on the leader ---------------------------------- */

/* on_ask takes follower @from's ask for its holder @holder (tag @tag). */
static void on_ask(struct ext_lease *l, struct raft_uv_node *d, raft_id from,
                   uint64_t tag, uint64_t holder, bool leading)
{
    char why[256];
    int rc;

    if (!leading) {
        send_result(l, d, from, tag, RAFT_LEASE_ASK, RAFT_NOTLEADER, 0, 0, 0);
        return;
    }
    if (l->state == LEASE_GRANTED && l->granted_by == l->self &&
        l->holder_server == from && l->holder == holder) {
        /* Its answer was lost: the same grant again. */
        send_result(l, d, from, tag, RAFT_LEASE_ASK, 0, l->id, l->grant_index,
                    0);
        return;
    }
    if (l->state != LEASE_NONE || l->hold_id != 0 || l->commit != COMMIT_NONE) {
        send_result(l, d, from, tag, RAFT_LEASE_ASK, RAFT_BUSY, 0, 0,
                    l->state == LEASE_GRANTED ? l->holder_server : l->self);
        return;
    }
    if (!may_grant(l, d, &rc, why, sizeof why)) {
        send_result(l, d, from, tag, RAFT_LEASE_ASK, rc, 0, 0, 0);
        return;
    }
    grant_to(l, raft_uv_node_core(d), from, holder, now_ms());
    note_active(l);
    send_result(l, d, from, tag, RAFT_LEASE_ASK, 0, l->id, l->grant_index, 0);
}

/* on_commit takes follower @from's commit @f (a changeset under its
 * lease). */
static void on_commit(struct ext_lease *l, struct raft_uv_node *d, raft_id from,
                      const struct raft_lease_request *f)
{
    const void *p = f->data != NULL ? f->data->data : NULL;
    size_t len = f->data != NULL ? f->data->len : 0;
    int rc;

    const struct lease_done *was = recall(l, from, f->id);

    if (was != NULL) {
        /* Its answer was lost: the same answer again. */
        send_result(l, d, from, f->tag, RAFT_LEASE_COMMIT, was->rc, f->id,
                    was->index, 0);
        return;
    }
    if (l->commit != COMMIT_NONE && l->commit_from == from &&
        l->commit_id == f->id) {
        l->commit_tag = f->tag; /* under way: answered when done */
        return;
    }
    if (l->state != LEASE_GRANTED || l->granted_by != l->self ||
        l->holder_server != from || l->id != f->id ||
        l->commit != COMMIT_NONE) {
        /* Not a lease this process granted and remembers (it restarted
         * since, or it is long gone): whether a COMMIT of it was
         * appended before is not known here. */
        send_result(l, d, from, f->tag, RAFT_LEASE_COMMIT, RAFT_UNKNOWN, f->id,
                    0, 0);
        return;
    }
    if (p == NULL || !sql_changeset_is(p, len) || len > l->max_bytes) {
        rc = len > l->max_bytes ? RAFT_TOOBIG : RAFT_INVALID;
        end_lease(l, rc, "its commit was refused");
        send_result(l, d, from, f->tag, RAFT_LEASE_COMMIT, rc, f->id, 0, 0);
        return;
    }
    l->commit = COMMIT_QUEUED;
    l->commit_seq++;
    l->commit_id = f->id;
    l->commit_from = from;
    l->commit_tag = f->tag;
    l->commit_remote = false;
    l->payload = raft_buf_ref(f->data);
    note_active(l);
}

/* on_release takes follower @from's release of lease @id. */
static void on_release(struct ext_lease *l, raft_id from, uint64_t id)
{
    if (l->state == LEASE_GRANTED && l->granted_by == l->self &&
        l->holder_server == from && l->id == id && l->commit == COMMIT_NONE) {
        end_lease(l, RAFT_INVALID, "lease %llu was released",
                  (unsigned long long)id);
    }
}

/* ---- The leader's answers, on a follower -------------------------------- */

/* on_ask_result takes the leader's answer @r to this node's ask. */
static void on_ask_result(struct ext_lease *l, struct raft_uv_node *d,
                          raft_id from, const struct raft_lease_result *r)
{
    uint64_t now = now_ms();

    if (l->state != LEASE_ASKED || r->tag != l->call_tag ||
        l->call_to != from) {
        if (r->status == 0 && !(l->state == LEASE_GRANTED &&
                                l->granted_by == from && l->id == r->id)) {
            /* A grant nobody waits for (its asker gave up): end it now,
             * not at the leader's lease_timeout_ms. */
            (void)send_call(l, d, from, RAFT_LEASE_RELEASE, 0, 0, r->id, NULL);
        }
        return;
    }
    switch (r->status) {
        case 0:
            l->state = LEASE_GRANTED;
            l->holder_server = l->self;
            l->granted_by = from;
            l->id = r->id;
            l->term = r->id >> 32;
            l->grant_index = r->index;
            l->granted_ms = now;
            hold_from(l, l->id, l->grant_index, now);
            break;
        case RAFT_BUSY:
            if (r->server != 0) {
                say(l->ask_why, sizeof l->ask_why,
                    "the write lease is held by a connection of server %llu",
                    (unsigned long long)r->server);
            } else {
                say(l->ask_why, sizeof l->ask_why,
                    "the write lease is held by another connection");
            }
            break;
        case RAFT_NOTLEADER:
            /* It stepped down: ask the next leader. */
            l->call_to = 0;
            return;
        case RAFT_FORMAT:
            say(l->ask_why, sizeof l->ask_why,
                "a member of the cluster cannot apply plain SQL writes yet "
                "(the leader, server %llu, says its wire version is too "
                "old): upgrade every node first",
                (unsigned long long)from);
            break;
        default:
            say(l->ask_why, sizeof l->ask_why, "the leader (server %llu): %s",
                (unsigned long long)from, raft_strerror(r->status));
            break;
    }
    answer_ask(l, r->status);
}

/* on_commit_result takes the leader's answer @r to this node's commit. */
static void on_commit_result(struct ext_lease *l, raft_id from,
                             const struct raft_lease_result *r)
{
    unsigned long long leader = (unsigned long long)from;

    if (l->commit != COMMIT_PROPOSED || !l->commit_remote ||
        r->tag != l->call_tag || l->call_to != from) {
        return;
    }
    switch (r->status) {
        case 0:
            l->index = r->index;
            answer_commit(l, NULL, 0, "committed at index %llu",
                          (unsigned long long)r->index);
            break;
        case RAFT_UNKNOWN:
            answer_commit(l, NULL, RAFT_UNKNOWN,
                          "outcome unknown: the leader (server %llu) cannot "
                          "tell whether the transaction's entry commits (it "
                          "stopped leading, or restarted, before it saw the "
                          "entry committed); the transaction will be applied "
                          "on all nodes or on none",
                          leader);
            break;
        case RAFT_TIMEOUT:
            answer_commit(l, NULL, RAFT_TIMEOUT,
                          "not applied: the lease expired at the leader "
                          "(server %llu) after lease_timeout_ms (%u ms)",
                          leader, l->timeout_ms);
            break;
        case RAFT_NOTLEADER:
            answer_commit(l, NULL, RAFT_NOTLEADER,
                          "not applied: a leader change ended the lease "
                          "(server %llu no longer leads, or appended another "
                          "entry first)",
                          leader);
            break;
        case RAFT_TOOBIG:
            answer_commit(l, NULL, RAFT_TOOBIG,
                          "not applied: the transaction exceeds the leader's "
                          "max_request_bytes (%llu here)",
                          (unsigned long long)l->max_bytes);
            break;
        default:
            answer_commit(l, NULL, r->status,
                          "not applied: the leader (server %llu) refused it: "
                          "lease %llu is not in force there (%s)",
                          leader, (unsigned long long)r->id,
                          raft_strerror(r->status));
            break;
    }
}

bool lease_is_frame(const struct raft_frame *f)
{
    return f->type == RAFT_FRAME_LEASE || f->type == RAFT_FRAME_LEASE_RESULT;
}

void lease_on_frame(struct ext_lease *l, struct raft_uv_node *d,
                    const struct raft_frame *f)
{
    const struct raft *core = raft_uv_node_core(d);
    bool leading = raft_role(core) == RAFT_LEADER && !raft_uv_node_failed(d);
    bool propose_now = false;

    pthread_mutex_lock(&l->mu);
    if (f->type == RAFT_FRAME_LEASE) {
        switch (f->lease.op) {
            case RAFT_LEASE_ASK:
                on_ask(l, d, f->from, f->lease.tag, f->lease.holder, leading);
                break;
            case RAFT_LEASE_COMMIT:
                on_commit(l, d, f->from, &f->lease);
                propose_now = l->commit == COMMIT_QUEUED;
                break;
            default:
                on_release(l, f->from, f->lease.id);
                break;
        }
    } else if (f->lease_result.op == RAFT_LEASE_ASK) {
        on_ask_result(l, d, f->from, &f->lease_result);
    } else {
        on_commit_result(l, f->from, &f->lease_result);
    }
    note_active(l);
    pthread_mutex_unlock(&l->mu);
    if (propose_now) {
        lease_on_loop(l, d);
    }
    raft_uv_node_wake(d); /* requests held back may go */
}
