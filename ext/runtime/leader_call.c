/* One call to the leader and its caller's wait (leader_call.h): the
 * owner's table, the deadline, the sliced wait that asks the caller's
 * probe outside the owner's mutex, how the wait ended, and the loop's
 * walk with its resend rule and its wire gate. */

#include "leader_call.h"

#include <string.h>

static bool before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec ||
           (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

struct timespec leader_call_deadline(unsigned ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* slice_end returns the earlier of @deadline and @poll_ms from now, and
 * in @out_last whether that is the deadline. */
static struct timespec slice_end(const struct timespec *deadline,
                                 unsigned poll_ms, bool *out_last)
{
    struct timespec t = leader_call_deadline(poll_ms);
    *out_last = !before(&t, deadline);
    return *out_last ? *deadline : t;
}

int leader_call_open(struct ext_leader_call_table *t,
                     struct ext_leader_call *call, void *item,
                     const uint64_t id[2], unsigned timeout_ms,
                     unsigned poll_ms)
{
    pthread_condattr_t ca;
    int rc;

    memset(call, 0, sizeof *call);
    if (pthread_condattr_init(&ca) != 0) {
        return RAFT_NOMEM;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&call->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        return RAFT_NOMEM;
    }
    if (id != NULL) {
        call->id[0] = id[0];
        call->id[1] = id[1];
    }
    call->state = EXT_CALL_QUEUED;
    call->poll_ms = poll_ms != 0 ? poll_ms : EXT_EXEC_POLL_MS;
    call->deadline = leader_call_deadline(timeout_ms);
    call->item = item;
    call->next = t->head;
    if (t->head != NULL) {
        t->head->prev = call;
    }
    t->head = call;
    t->n++;
    return 0;
}

void leader_call_close(struct ext_leader_call_table *t,
                       struct ext_leader_call *call)
{
    if (call->prev != NULL) {
        call->prev->next = call->next;
    } else {
        t->head = call->next;
    }
    if (call->next != NULL) {
        call->next->prev = call->prev;
    }
    call->next = call->prev = NULL;
    t->n--;
    pthread_cond_destroy(&call->cond);
}

/* ended returns how @call's wait ends now, or -1 while it goes on.
 * Caller holds the owner's mutex. */
static int ended(const struct ext_leader_call *call)
{
    if (call->state == EXT_CALL_DONE) {
        return EXT_CALL_ANSWERED;
    }
    if (call->shutdown) {
        return EXT_CALL_SHUTDOWN;
    }
    if (call->expired) {
        return EXT_CALL_EXPIRED;
    }
    return -1;
}

int leader_call_wait(struct ext_leader_call *call, pthread_mutex_t *mu,
                     const struct ext_exec_probe *probe)
{
    int end;

    while ((end = ended(call)) < 0) {
        struct timespec slice = call->deadline;
        bool last = true;
        bool stop;

        /* Without a probe nothing needs asking before the deadline. */
        if (probe != NULL) {
            slice = slice_end(&call->deadline, call->poll_ms, &last);
        }
        if (pthread_cond_timedwait(&call->cond, mu, &slice) == 0 ||
            ended(call) >= 0) {
            continue; /* woken: look again (the deadline may have moved) */
        }
        if (last && !before(&slice, &call->deadline)) {
            return EXT_CALL_EXPIRED;
        }
        if (probe == NULL) {
            continue; /* the deadline moved on (leader_call_extend) */
        }
        /* The probe runs SQL on the caller's own connection: never under
         * the owner's mutex. */
        pthread_mutex_unlock(mu);
        stop = probe->interrupted(probe->data);
        pthread_mutex_lock(mu);
        if (stop && ended(call) < 0) {
            return EXT_CALL_INTERRUPTED;
        }
    }
    return end;
}

int leader_call_poll(const struct timespec *deadline, unsigned poll_ms,
                     const struct ext_exec_probe *probe,
                     bool (*ready)(void *data), void *data)
{
    if (poll_ms == 0) {
        poll_ms = EXT_EXEC_POLL_MS;
    }
    for (;;) {
        struct timespec now,
            pause = {.tv_sec = poll_ms / 1000,
                     .tv_nsec = (long)(poll_ms % 1000) * 1000000L};
        if (ready(data)) {
            return EXT_CALL_ANSWERED;
        }
        if (probe != NULL && probe->interrupted(probe->data)) {
            return EXT_CALL_INTERRUPTED;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!before(&now, deadline)) {
            return EXT_CALL_EXPIRED;
        }
        nanosleep(&pause, NULL);
    }
}

void *leader_call_find(const struct ext_leader_call_table *t,
                       const uint64_t id[2])
{
    for (struct ext_leader_call *c = t->head; c != NULL; c = c->next) {
        if (c->id[0] == id[0] && c->id[1] == id[1]) {
            return c->item;
        }
    }
    return NULL;
}

void *leader_call_next(const struct ext_leader_call_table *t,
                       const struct ext_leader_call *after)
{
    const struct ext_leader_call *c = after != NULL ? after->next : t->head;
    return c != NULL ? c->item : NULL;
}

unsigned leader_call_count(const struct ext_leader_call_table *t)
{
    return t->n;
}

void leader_call_need_wire(struct ext_leader_call *call, unsigned wire)
{
    call->wire_needed = wire;
}

/* gate says what the wire gate does with @c, due to go to @to under
 * @policy: 0 it goes, 1 it is held back, 2 it is refused. */
static int gate(const struct ext_leader_call *c,
                const struct ext_leader_call_policy *policy,
                const struct ext_leader_call_server *to)
{
    if (c->wire_needed == 0) {
        return 0;
    }
    if (to->wire == 0) {
        return policy->wait_for_wire ? 1 : 0;
    }
    return to->wire < c->wire_needed ? 2 : 0;
}

void *leader_call_take_due(struct ext_leader_call_table *t,
                           const struct ext_leader_call *after,
                           const struct ext_leader_call_policy *policy,
                           const struct ext_leader_call_server *to,
                           uint64_t now, ext_leader_call_hold_cb hold,
                           void *data, bool *out_refused)
{
    struct ext_leader_call *c = after != NULL ? after->next : t->head;

    for (; c != NULL; c = c->next) {
        int g;

        if (c->state != EXT_CALL_QUEUED && c->state != EXT_CALL_SENT) {
            continue; /* TAKEN or DONE: never sent again */
        }
        if (hold != NULL && hold(c->item, data)) {
            continue;
        }
        /* The resend rule: a SENT call goes again to another leader
         * (when the policy follows it) or once overdue. */
        if (c->state == EXT_CALL_SENT &&
            !(policy->follow_leader && c->sent_to != to->id) &&
            now < c->sent_at + policy->retry_ms) {
            continue;
        }
        /* The wire gate: due, but not to a server that cannot take it.
         * Back to QUEUED, as a send taken back: its answer from the
         * server it went to before is no longer awaited. */
        g = gate(c, policy, to);
        if (g == 2 && out_refused != NULL) {
            c->state = EXT_CALL_QUEUED;
            *out_refused = true;
            return c->item;
        }
        if (g != 0) {
            c->state = EXT_CALL_QUEUED;
            continue;
        }
        c->state = EXT_CALL_SENT;
        c->left_before = c->left_node;
        c->left_node = true;
        c->attempts++;
        c->sent_at = now;
        c->sent_to = to->id;
        if (out_refused != NULL) {
            *out_refused = false;
        }
        return c->item;
    }
    return NULL;
}

void leader_call_unsend(struct ext_leader_call *call)
{
    call->state = EXT_CALL_QUEUED;
    call->left_node = call->left_before;
}

void leader_call_refused(struct ext_leader_call *call)
{
    call->left_node = call->left_before;
}

void leader_call_requeue(struct ext_leader_call *call)
{
    call->state = EXT_CALL_QUEUED;
}

void leader_call_restart_clock(struct ext_leader_call *call, uint64_t now)
{
    call->sent_at = now;
}

void leader_call_taken(struct ext_leader_call *call)
{
    call->state = EXT_CALL_TAKEN;
}

void leader_call_finish(struct ext_leader_call *call)
{
    call->state = EXT_CALL_DONE;
    pthread_cond_signal(&call->cond);
}

void leader_call_shutdown(struct ext_leader_call *call)
{
    call->shutdown = true;
    pthread_cond_signal(&call->cond);
}

void leader_call_expire(struct ext_leader_call *call)
{
    call->expired = true;
    pthread_cond_signal(&call->cond);
}

void leader_call_extend(struct ext_leader_call *call, unsigned ms)
{
    struct timespec t = leader_call_deadline(ms);
    if (before(&call->deadline, &t)) {
        call->deadline = t;
        pthread_cond_signal(&call->cond);
    }
}
